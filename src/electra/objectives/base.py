"""The one interface the training loop sees: `out = objective(batch)`; `out.loss.backward()`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from electra.config import ObjectiveConfig
from electra.objectives.masking import SpecialIds


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


@dataclass
class ObjectiveContext:
    """What an objective may need beyond its configs: the tokenizer's special ids, and corpus
    token counts (called only by objectives that need them, e.g. the unigram generator)."""

    special: SpecialIds = field(default_factory=SpecialIds)
    token_counts: Callable[[], torch.Tensor] | None = None


def resolved(obj_cfg: ObjectiveConfig) -> ObjectiveConfig:
    """A copy with the objective's defaults filled in (see ObjectiveConfig.resolve_defaults)."""
    cfg = dataclasses.replace(obj_cfg)
    cfg.resolve_defaults()
    return cfg


class Objective(nn.Module):
    """An objective owns every network it trains and knows how to export them. Subclasses are
    built as `cls(model_cfg, obj_cfg, context)` and call `super().__init__(obj_cfg, context)`.
    """

    def __init__(self, obj_cfg: ObjectiveConfig, context: ObjectiveContext | None = None):
        super().__init__()
        # Defaults filled here too, so an objective built directly (not by build_objective)
        # runs with its published settings.
        self.cfg = resolved(obj_cfg)
        self.special = (context or ObjectiveContext()).special

    def on_step_start(self, step: int, total_steps: int) -> None:
        """Called by the loop before optimizer step `step` (0-based, steps already taken), also
        right after a resume, so algorithms with phases (two-stage training) can switch."""

    @staticmethod
    def step_flops_breakdown(model_cfg, obj_cfg, batch_size: int, seq_len: int
                             ) -> dict[str, float]:  # pragma: no cover
        """Training FLOPs (forward + backward) of one optimizer step, by component."""
        raise NotImplementedError

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
    if "masked" in c and "gen_correct" in c:
        out["gen_acc"] = safe_ratio(c["gen_correct"], c["masked"])
    if "masked" in c and "replaced" in c:
        out["replaced_frac"] = safe_ratio(c["replaced"], c["masked"])
    if "mlm_predicted" in c:  # the MLM being pre-trained (mlm, replace-mlm, all-tokens-mlm)
        out["mlm_acc"] = safe_ratio(c["mlm_correct"], c["mlm_predicted"])
    if "tokens" in c:
        out["disc_acc"] = safe_ratio(c["disc_correct"], c["tokens"])
        out["replaced_token_frac"] = safe_ratio(c["replaced"], c["tokens"])
        out["disc_precision"] = safe_ratio(c["disc_true_pos"], c["disc_pred_pos"])
        out["disc_recall"] = safe_ratio(c["disc_true_pos"], c["replaced"])
    return out
