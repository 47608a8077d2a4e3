"""The one interface the training loop sees: `out = objective(batch)`; `out.loss.backward()`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class ObjectiveOutput:
    """`loss` is what is minimised; `losses` are its named parts (detached scalars); `counts`
    are summable numerators/denominators from which `metrics_from_counts` derives
    accuracies, so that metrics over many steps and ranks are exact, not averages of ratios."""

    loss: torch.Tensor
    losses: dict[str, torch.Tensor] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)
    # Per-token tensors for evaluation (e.g. discriminator logits and labels), detached.
    details: dict[str, torch.Tensor] = field(default_factory=dict)


class Objective(nn.Module):
    """An objective owns every network it trains and knows how to export them."""

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:  # pragma: no cover
        raise NotImplementedError

    def exportable(self) -> dict[str, nn.Module]:  # pragma: no cover
        """Name -> model to write under OUT/final/NAME (e.g. discriminator, generator)."""
        raise NotImplementedError


def safe_ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def metrics_from_counts(counts: dict[str, float]) -> dict[str, float]:
    """Ratios from summed counts. Keys present depend on the objective."""
    c = counts
    out: dict[str, float] = {}
    if "masked" in c:
        out["gen_acc"] = safe_ratio(c["gen_correct"], c["masked"])
        out["replaced_frac"] = safe_ratio(c["replaced"], c["masked"])
    if "tokens" in c:
        out["disc_acc"] = safe_ratio(c["disc_correct"], c["tokens"])
        out["replaced_token_frac"] = safe_ratio(c["replaced"], c["tokens"])
        out["disc_precision"] = safe_ratio(c["disc_true_pos"], c["disc_pred_pos"])
        out["disc_recall"] = safe_ratio(c["disc_true_pos"], c["replaced"])
    return out
