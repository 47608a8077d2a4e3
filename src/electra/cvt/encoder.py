"""The CNN-BiLSTM sentence encoder (section 4.2.1, Table 4.1).

Each word is its (normalised) word embedding concatenated with a character CNN over its
spelling (the paper's text says "sum"; the reference implementation concatenates, as here),
then two Bi-LSTM layers with projections. The first layer's forward and backward outputs are
returned separately: the auxiliary modules (4.2.2, 4.2.3) need them to restrict their views.
Dropout is applied to the word representations and to each Bi-LSTM's outputs (4.3.1) at the
keep probability passed to `forward`, since CVT uses different rates on labeled and
unlabeled batches (Table 4.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from electra.cvt.config import CVTConfig


def drop(x: torch.Tensor, keep: float) -> torch.Tensor:
    return F.dropout(x, p=1.0 - keep, training=keep < 1.0)


class CharCNN(nn.Module):
    """Filters of several widths over character embeddings, ReLU, max over the word.

    The max only covers windows inside the word (or the first window of a word shorter than
    the filter), so a word's vector does not depend on how long the other words of its batch
    are."""

    def __init__(self, n_chars: int, dim: int, widths: list[int], filters: int):
        super().__init__()
        self.embed = nn.Embedding(n_chars, dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, w) for w in widths)
        self.widths = list(widths)
        self.out_dim = filters * len(widths)

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        b, t, length = chars.shape
        flat = chars.reshape(b * t, length)
        if length < max(self.widths):  # every filter needs at least one full window
            flat = F.pad(flat, (0, max(self.widths) - length))
        n_chars = (flat != 0).sum(1)
        x = self.embed(flat).transpose(1, 2)  # [words, dim, chars]
        pooled = []
        for conv, w in zip(self.convs, self.widths, strict=True):
            y = conv(x)  # [words, filters, windows]
            last = (n_chars.clamp(min=w) - w)[:, None, None]
            inside = torch.arange(y.shape[2], device=y.device)[None, None, :] <= last
            pooled.append(F.relu(y.masked_fill(~inside, float("-inf")).amax(dim=2)))
        return torch.cat(pooled, dim=1).reshape(b, t, self.out_dim)


def _lstm(input_size: int, size: int, projection: int) -> nn.LSTM:
    # torch's proj_size must be smaller than the hidden size; a projection as large as the
    # state (the paper's second layer: 512 -> 512) adds no capacity, so it is left out.
    proj = projection if projection < size else 0
    return nn.LSTM(input_size, size, batch_first=True, bidirectional=True, proj_size=proj)


@dataclass
class Encoded:
    """h1 split into its directions (what auxiliary modules see) and the full h1 ⊕ h2 view."""

    fwd1: torch.Tensor  # [B, T, d1] forward LSTM of layer 1: sees words 1..t
    bwd1: torch.Tensor  # [B, T, d1] backward LSTM of layer 1: sees words t..T
    full: torch.Tensor  # [B, T, 2*d1 + 2*d2] h1 ⊕ h2: sees the whole sentence
    mask: torch.Tensor  # [B, T] bool, True on real words


class Encoder(nn.Module):
    def __init__(self, cfg: CVTConfig, n_words: int, n_chars: int):
        super().__init__()
        self.word_embed = nn.Embedding(n_words, cfg.word_dim, padding_idx=0)
        nn.init.normal_(self.word_embed.weight, std=0.1)  # random unless --word-vectors
        self.chars = CharCNN(n_chars, cfg.char_dim, cfg.char_widths, cfg.char_filters)
        self.lstm1 = _lstm(cfg.word_dim + self.chars.out_dim, cfg.lstm1, cfg.projection)
        self.d1 = self.lstm1.proj_size or cfg.lstm1
        self.lstm2 = _lstm(2 * self.d1, cfg.lstm2, cfg.projection)
        self.d2 = self.lstm2.proj_size or cfg.lstm2
        self.full_dim = 2 * self.d1 + 2 * self.d2

    @staticmethod
    def _run(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # Packing makes the backward direction start at each sentence's own last word, so
        # padding never leaks into a view.
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = lstm(packed)
        return pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])[0]

    def forward(self, words: torch.Tensor, chars: torch.Tensor, lengths: torch.Tensor,
                keep: float) -> Encoded:
        x = torch.cat([drop(self.word_embed(words), keep), drop(self.chars(chars), keep)], -1)
        h1 = drop(self._run(self.lstm1, x, lengths), keep)
        h2 = drop(self._run(self.lstm2, h1, lengths), keep)
        mask = torch.arange(words.shape[1], device=words.device)[None, :] < lengths[:, None].to(
            words.device)
        return Encoded(h1[..., : self.d1], h1[..., self.d1:], torch.cat([h1, h2], -1), mask)
