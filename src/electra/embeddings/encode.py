"""Texts to vectors: an encoder's token states pooled into one vector per text.

Pooling follows sentence-transformers' `Pooling` module: `mean` (the default) averages the
token states where the attention mask is 1, special tokens included; `cls` takes the first
token's state; `last` the last real token's. `normalize` scales each vector to unit length, so
a dot product is the cosine.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from electra.device import resolve_device, to_device
from electra.embeddings import POOLINGS
from electra.errors import ElectraError
from electra.hub import resolve_model_path
from electra.tokenizer import tokenized_batch

DEFAULT_MAX_SEQ_LEN = 256


@dataclass(frozen=True)
class Pooling:
    mode: str = "mean"
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.mode not in POOLINGS:
            raise ElectraError(f"pooling: {self.mode!r} is not one of {', '.join(POOLINGS)}")


DEFAULT_POOLING = Pooling()  # mean over the attention mask, normalised


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """[B, S, H] token states and their [B, S] attention mask -> [B, H] float32 vectors."""
    hidden, mask = hidden.float(), mask.to(hidden.device)
    if pooling.mode == "cls":
        vectors = hidden[:, 0]
    elif pooling.mode == "last":
        last = mask.sum(1).long() - 1
        vectors = hidden[torch.arange(len(hidden), device=hidden.device), last]
    else:
        weights = mask.unsqueeze(-1).float()
        vectors = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)
    if pooling.normalize:
        vectors = torch.nn.functional.normalize(vectors, dim=-1)
    return vectors


class Embedder:
    """An encoder (a folder, a pre-training run or checkpoint, or a Hub id at `revision`) and
    its tokenizer, embedding texts in batches of similar length."""

    def __init__(self, model: str | Path, pooling: Pooling = DEFAULT_POOLING,
                 max_seq_len: int = DEFAULT_MAX_SEQ_LEN, batch_size: int = 64,
                 device: str = "auto", revision: str | None = None):
        from electra.finetuning.model_io import load_source

        self.model_dir = resolve_model_path(model, revision)
        self.encoder, self.tokenizer, _ = load_source(self.model_dir)
        self.device = resolve_device(device)
        self.encoder.to(self.device).eval()
        # never past the positions the model has (an absolute-position encoder's table)
        self.max_seq_len = min(max_seq_len, self.encoder.config.max_position_embeddings)
        self.pooling, self.batch_size = pooling, batch_size

    @property
    def dim(self) -> int:
        return self.encoder.config.hidden_size

    @torch.no_grad()
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 [len(texts), dim], in the order of `texts`."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for idx in self._batches(texts):
            batch = to_device(tokenized_batch(self.tokenizer, [texts[i] for i in idx],
                                              self.max_seq_len), self.device)
            hidden = self.encoder(batch["input_ids"], batch["token_type_ids"],
                                  batch["attention_mask"])
            out[idx] = pool(hidden, batch["attention_mask"], self.pooling).cpu().numpy()
        return out

    def _batches(self, texts: Sequence[str]) -> Iterator[list[int]]:
        """Indices of `texts` in batches, longest first (by characters: cheap, and close
        enough to group similar token lengths and pad less)."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start:start + self.batch_size]
