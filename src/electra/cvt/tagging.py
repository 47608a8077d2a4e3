"""Sequence tagging with CVT (section 4.2.2).

Primary module: NN(h1 ⊕ h2). Auxiliary modules on the first Bi-LSTM layer only (its second
layer has seen the whole sentence, footnote 3):
    fwd    NN(fwd1[t])      words 1..t
    bwd    NN(bwd1[t])      words t..T
    future NN(fwd1[t-1])    words 1..t-1  (zero vector at t = 1)
    past   NN(bwd1[t+1])    words t+1..T  (zero vector at t = T)
plus, as in 4.3.1, a `full` module on h1 ⊕ h2 that differs from the primary by being trained
under dropout on unlabeled data (and, as in the reference, by having no ReLU).

The future module has nothing to read for the first word and the past module nothing for the
last one. The reference never trains them there (its loss mask is shifted with the labels), so
`view_mask` leaves those positions out of L_CVT rather than fitting a constant prediction from
a zero vector, which would only pull the modules' biases toward first/last-word labels.
"""

from __future__ import annotations

import torch
from torch import nn

from electra.cvt.encoder import Encoded
from electra.cvt.modules import PredictionModule

TAGGING_VIEWS = ("fwd", "bwd", "future", "past")


def _shift(x: torch.Tensor, by: int) -> torch.Tensor:
    """x shifted along time: by=+1 gives out[t] = x[t-1], by=-1 gives out[t] = x[t+1]."""
    zero = torch.zeros_like(x[:, :1])
    return torch.cat([zero, x[:, :-1]], 1) if by > 0 else torch.cat([x[:, 1:], zero], 1)


def tagging_views(enc: Encoded) -> dict[str, torch.Tensor]:
    """The restricted inputs of the four auxiliary modules. Past reads bwd1[t+1], which is a
    padded (zero) position after a sentence's last word, so padding cannot leak either."""
    fwd = enc.fwd1
    bwd = enc.bwd1 * enc.mask[..., None]
    return {"fwd": fwd, "bwd": bwd, "future": _shift(fwd, +1), "past": _shift(bwd, -1)}


class TaggingHead(nn.Module):
    kind = "tag"

    def __init__(self, n_labels: int, d1: int, full_dim: int, hidden: int, full_view: bool):
        super().__init__()
        self.primary = PredictionModule(full_dim, hidden, n_labels)
        self.aux = nn.ModuleDict({v: PredictionModule(d1, hidden, n_labels)
                                  for v in TAGGING_VIEWS})
        if full_view:
            self.aux["full"] = PredictionModule(full_dim, hidden, n_labels, activate=False)

    def forward(self, enc: Encoded) -> torch.Tensor:
        return self.primary(enc.full)

    def auxiliary(self, enc: Encoded) -> dict[str, torch.Tensor]:
        views = tagging_views(enc)
        views["full"] = enc.full
        return {name: module(views[name]) for name, module in self.aux.items()}

    @staticmethod
    def view_mask(view: str, enc: Encoded) -> torch.Tensor:
        """Positions where `view`'s prediction is trained: future needs a previous word,
        past a next one."""
        mask = enc.mask
        if view == "future":
            return mask & _shift(mask[..., None], +1)[..., 0]
        if view == "past":
            return mask & _shift(mask[..., None], -1)[..., 0]
        return mask

    @staticmethod
    def targets(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return batch["tags"]

    @staticmethod
    def decode(logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(-1)
