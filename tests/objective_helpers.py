"""Tiny encoder configs and batches shared by the objective tests."""

from __future__ import annotations

import torch

from electra.config import ModelConfig
from electra.objectives import SpecialIds

SPECIAL = SpecialIds()
VOCAB = 50


def small_model(**kw) -> ModelConfig:
    base = dict(vocab_size=VOCAB, embedding_size=24, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return ModelConfig(**{**base, **kw})


def make_batch(batch: int = 4, seq: int = 32, pad_from: int | None = None, seed: int = 0,
               sentence_pair: bool = True) -> dict[str, torch.Tensor]:
    """Random tokens as `[CLS] ... [SEP]` (with `sentence_pair`, `[CLS] A [SEP] B [SEP]` and
    token types 0/1); the last row is padded from `pad_from` on."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, seq), generator=g)
    ids[:, 0] = SPECIAL.cls
    ids[:, -1] = SPECIAL.sep
    types = torch.zeros_like(ids)
    if sentence_pair:
        ids[:, seq // 2] = SPECIAL.sep
        types[:, seq // 2 + 1:] = 1
    mask = torch.ones_like(ids)
    if pad_from is not None:
        ids[-1, pad_from:] = SPECIAL.pad
        ids[-1, pad_from - 1] = SPECIAL.sep
        mask[-1, pad_from:] = 0
        types[-1, pad_from:] = 0
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
