"""The CNN-BiLSTM sentence encoder (section 4.2.1, Table 4.1).

Each word is its (normalised) word embedding concatenated with a character CNN over its
spelling (the paper's text says "sum"; the reference implementation concatenates, as here),
then two Bi-LSTM layers with projections. The first layer's forward and backward outputs are
returned separately: the auxiliary modules (4.2.2, 4.2.3) need them to restrict their views.
Dropout is applied to the word representations and to each Bi-LSTM's outputs (4.3.1) at the
keep probability passed to `forward`, since CVT uses different rates on labeled and
unlabeled batches (Table 4.1).

With `boundary_tokens` (the reference's Example/_make_minibatch) the LSTMs run over
`<start> w1 .. wT <end>` and every word's characters are read as `<pad> <bow> c1 .. cn <eow>
<pad>`; the boundary words' characters are one `<missing>` character. The outputs at the
boundary positions are dropped before anything else sees them, so heads, losses and
predictions only ever see real words. With `tf_init` the weights start as TensorFlow's
defaults would (`tf_init_`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from electra.cvt.bilstm import bilstm
from electra.cvt.config import CVTConfig


def drop(x: torch.Tensor, keep: float) -> torch.Tensor:
    return F.dropout(x, p=1.0 - keep, training=keep < 1.0)


class CharCNN(nn.Module):
    """Filters of several widths over character embeddings, ReLU, max over the word.

    The max only covers windows inside the word (or the first window of a word shorter than
    the filter), so a word's vector does not depend on how long the other words of its batch
    are. With `boundaries`, three ids after the vocabulary's characters are the reference's
    begin-of-word, end-of-word and missing-character marks (base/embeddings.py START, END,
    MISSING), and a word is read as `<pad> <bow> c1 .. cn <eow> <pad>` as the reference's
    minibatching._make_minibatch builds it (its windows over those two pads count as inside)."""

    def __init__(self, n_chars: int, dim: int, widths: list[int], filters: int,
                 boundaries: bool = False):
        super().__init__()
        self.boundaries = boundaries
        self.bow, self.eow, self.missing = n_chars, n_chars + 1, n_chars + 2
        self.embed = nn.Embedding(n_chars + 3 * boundaries, dim, padding_idx=0)
        self.convs = nn.ModuleList(nn.Conv1d(dim, filters, w) for w in widths)
        self.widths = list(widths)
        self.out_dim = filters * len(widths)

    def _mark(self, flat: torch.Tensor, n_chars: torch.Tensor) -> torch.Tensor:
        """[words, L] -> [words, L + 4]: `<pad> <bow> chars <eow> <pad>` (then padding)."""
        out = F.pad(flat, (2, 2))
        out[:, 1] = self.bow
        out[torch.arange(len(flat), device=flat.device), n_chars + 2] = self.eow
        return out

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        b, t, length = chars.shape
        # A word's vector depends on its own spelling only, so each distinct spelling of the
        # batch (padding included) goes through the CNN once: a batch of 64 sentences holds
        # each word 2-3 times on average, and the convolutions are a quarter of a CVT step.
        flat, inverse = torch.unique(chars.reshape(b * t, length), dim=0, return_inverse=True)
        return self._encode(flat)[inverse].reshape(b, t, self.out_dim)

    def _encode(self, flat: torch.Tensor) -> torch.Tensor:
        """[words, L] character ids -> [words, out_dim]."""
        n_chars = (flat != 0).sum(1)
        if self.boundaries:
            flat, n_chars = self._mark(flat, n_chars), n_chars + 4
        if flat.shape[1] < max(self.widths):  # every filter needs at least one full window
            flat = F.pad(flat, (0, max(self.widths) - flat.shape[1]))
        x = self.embed(flat).transpose(1, 2)  # [words, dim, chars]
        pooled = []
        for conv, w in zip(self.convs, self.widths, strict=True):
            y = conv(x)  # [words, filters, windows]
            last = (n_chars.clamp(min=w) - w)[:, None, None]
            inside = torch.arange(y.shape[2], device=y.device)[None, None, :] <= last
            pooled.append(F.relu(y.masked_fill(~inside, float("-inf")).amax(dim=2)))
        return torch.cat(pooled, dim=1)


def _lstm(input_size: int, size: int, projection: int) -> nn.LSTM:
    # torch's proj_size must be smaller than the hidden size; a projection as large as the
    # state (the paper's second layer: 512 -> 512) adds no capacity, so it is left out.
    proj = projection if projection < size else 0
    return nn.LSTM(input_size, size, batch_first=True, bidirectional=True, proj_size=proj)


def glorot_(weight: torch.Tensor, fan_in: int, fan_out: int) -> None:
    """TensorFlow's default initialiser (glorot_uniform) for a matrix of these fans."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    nn.init.uniform_(weight, -limit, limit)


def tf_init_lstm_(lstm: nn.LSTM) -> None:
    """As tf.nn.rnn_cell.LSTMCell starts (model_helpers.lstm_cell): one Glorot-uniform kernel
    of shape [input + recurrent, 4 * units] (torch splits it into weight_ih and weight_hh, so
    both get that kernel's fans), a Glorot-uniform projection [units, proj], zero biases, and
    forget_bias=1.0 added to the forget gate (torch's gate order is i, f, g, o)."""
    h = lstm.hidden_size
    recurrent = lstm.proj_size or h
    for name, p in lstm.named_parameters():
        if name.startswith("weight_ih") or name.startswith("weight_hh"):
            glorot_(p.data, lstm.input_size + recurrent, 4 * h)
        elif name.startswith("weight_hr"):
            glorot_(p.data, h, lstm.proj_size)
        elif name.startswith("bias_hh"):
            nn.init.zeros_(p.data)
        elif name.startswith("bias_ih"):
            nn.init.zeros_(p.data)
            p.data[h: 2 * h] = 1.0


def tf_init_(module: nn.Module) -> None:
    """TensorFlow's defaults for every layer under `module`: tf.layers.dense/conv1d and
    tf.get_variable use Glorot-uniform weights and zero biases (so do the reference's
    character embeddings, encoder._get_word_reprs: about 8x smaller than torch's N(0, 1));
    LSTMs as `tf_init_lstm_`. Word embeddings are left alone (GloVe in the reference, zero
    rows for its special tokens; std 0.1 random here without --word-vectors)."""
    for m in module.modules():
        if isinstance(m, nn.LSTM):
            tf_init_lstm_(m)
        elif isinstance(m, (nn.Linear, nn.Conv1d)):
            nn.init.xavier_uniform_(m.weight)  # conv: fans are in/out channels x width
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, CharCNN):
            nn.init.xavier_uniform_(m.embed.weight)
            with torch.no_grad():
                m.embed.weight[0] = 0.0  # padding stays zero (padding_idx)


@dataclass
class Encoded:
    """h1 split into its directions (what auxiliary modules see) and the full h1 ⊕ h2 view."""

    fwd1: torch.Tensor  # [B, T, d1] forward LSTM of layer 1: sees words 1..t
    bwd1: torch.Tensor  # [B, T, d1] backward LSTM of layer 1: sees words t..T
    full: torch.Tensor  # [B, T, 2*d1 + 2*d2] h1 ⊕ h2: sees the whole sentence
    mask: torch.Tensor  # [B, T] bool, True on real words
    keep: float = 1.0  # the dropout keep probability of this pass (the parser's hidden layers)


class Encoder(nn.Module):
    def __init__(self, cfg: CVTConfig, n_words: int, n_chars: int):
        super().__init__()
        self.word_embed = nn.Embedding(n_words, cfg.word_dim, padding_idx=0)
        nn.init.normal_(self.word_embed.weight, std=0.1)  # random unless --word-vectors
        self.chars = CharCNN(n_chars, cfg.char_dim, cfg.char_widths, cfg.char_filters,
                             boundaries=cfg.boundary_tokens)
        self.lstm1 = _lstm(cfg.word_dim + self.chars.out_dim, cfg.lstm1, cfg.projection)
        self.d1 = self.lstm1.proj_size or cfg.lstm1
        self.lstm2 = _lstm(2 * self.d1, cfg.lstm2, cfg.projection)
        self.d2 = self.lstm2.proj_size or cfg.lstm2
        self.full_dim = 2 * self.d1 + 2 * self.d2
        self.boundary_tokens = cfg.boundary_tokens
        if cfg.boundary_tokens:
            # word embeddings of <start>, <end>: zero vectors at first, like the reference's
            # special tokens (embeddings.PretrainedEmbeddingLoader.build), then trained
            self.boundary_words = nn.Parameter(torch.zeros(2, cfg.word_dim))

    def _add_boundaries(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> [B, T + 2, D]: <start> before and <end> right after each sentence.
        Their character part is the CNN over a `<missing>` character (example.Example)."""
        missing = torch.full((1, 1, 1), self.chars.missing, device=x.device)
        char_part = self.chars(missing)[0, 0].expand(2, -1)
        marks = torch.cat([self.boundary_words, char_part], -1)  # [2, D]: <start>, <end>
        b, t, _ = x.shape
        pos = torch.arange(t + 2, device=x.device)[None, :, None]
        end = (lengths.to(x.device) + 1)[:, None, None]
        inner = F.pad(x, (0, 0, 1, 1))
        return torch.where(pos == 0, marks[0], torch.where(pos == end, marks[1], inner))

    def forward(self, words: torch.Tensor, chars: torch.Tensor, lengths: torch.Tensor,
                keep: float) -> Encoded:
        # dropout on word embeddings and character features alike (the reference drops
        # both, <start>/<end> included), one mask over their concatenation
        x = torch.cat([self.word_embed(words), self.chars(chars)], -1)
        t = words.shape[1]
        mask = torch.arange(t, device=words.device)[None, :] < lengths[:, None].to(
            words.device)
        run_lengths = lengths
        if self.boundary_tokens:
            x, run_lengths = self._add_boundaries(x, lengths), lengths + 2
        x = drop(x, keep)
        h1 = drop(bilstm(self.lstm1, x, run_lengths), keep)
        h2 = drop(bilstm(self.lstm2, h1, run_lengths), keep)
        if self.boundary_tokens:  # back to the real words; <end>'s outputs become padding
            h1, h2 = (h[:, 1: t + 1] * mask[..., None] for h in (h1, h2))
        return Encoded(h1[..., : self.d1], h1[..., self.d1:], torch.cat([h1, h2], -1), mask,
                       keep)
