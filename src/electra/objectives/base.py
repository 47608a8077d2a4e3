"""The one interface the training loop sees: `out = objective(batch)`; `out.loss.backward()`.

An objective is one class that says everything the rest of the toolkit needs to know about it,
so adding one is one module plus a line in `electra.config.OBJECTIVES` (which also holds its
values for `ObjectiveConfig` fields left at None, its published settings):

- `forward(batch) -> ObjectiveOutput`, `exportable()`, optionally `on_step_start`;
- `metrics`: ratios of its summed counts that are logged (`metrics_from_counts`);
- `generator_model_config`: the generator network it trains, if any (`electra flops` reports
  its size);
- `discriminator_scorer`: the PLL scorer that reads its exported discriminator, if any
  (`electra score` picks it from the export's metadata);
- `step_flops_breakdown`: what one step computes, by the rules of section 5.2.2.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import torch
from torch import nn

from electra import flops
from electra.config import ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.objectives.masking import SpecialIds

# (numerator count, denominator count) of a logged ratio.
Ratio = tuple[str, str]
# What `electra pretrain --init-from` continues for an objective (electra.pretraining.init_from):
# "discriminator+generator": the discriminator, and the generator where the checkpoint has one
#   or --init-generator names one (ELECTRA);
# "discriminator": the discriminator; everything else it trains (a generator, heads of its own)
#   starts new;
# "mlm": the one network a masked language model trains.
Continues = Literal["discriminator+generator", "discriminator", "mlm"]
CONTINUES: tuple[str, ...] = ("discriminator+generator", "discriminator", "mlm")


def argmax_hits(logits: torch.Tensor, targets: torch.Tensor,
                weights: torch.Tensor | None = None) -> torch.Tensor:
    """How many rows' argmax is their target (among the rows of weight True, when `weights`
    is given): a summable accuracy count. Taken in fp32 (pass the fp32 logits the loss reads,
    so nothing is cast twice): exact for bf16 logits, and bf16's argmax is twice as slow on
    CPU."""
    hits = logits.detach().float().argmax(-1) == targets
    if weights is not None:
        hits &= weights
    return hits.sum().float()

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

    # Logged ratios: metric name -> (numerator, denominator) among `ObjectiveOutput.counts`.
    metrics: ClassVar[dict[str, Ratio]] = {}
    # electra.scoring's scorer for the exported discriminator; None: it gives no PLL.
    discriminator_scorer: ClassVar[str | None] = None
    # What `--init-from` continues (`Continues`); None: it starts from random weights only.
    continues: ClassVar[Continues | None] = None
    # Its default length in `electra flops`: the preset's ELECTRA or BERT step budget (Table
    # 5.1 gives BERT's MLM its own, longer one).
    step_budget: ClassVar[Literal["electra", "bert"]] = "electra"
    # The generator kinds, weight sharings and training algorithms it trains with (names in
    # `electra.config`'s registries; None: every one); others are refused by `check_supported`.
    generators: ClassVar[tuple[str, ...] | None] = None
    sharings: ClassVar[tuple[str, ...] | None] = None
    algorithms: ClassVar[tuple[str, ...] | None] = None

    @classmethod
    def check_supported(cls, obj_cfg: ObjectiveConfig) -> None:
        """One line naming the setting, the objective and what it takes, for a generator,
        sharing or algorithm this objective does not train with."""
        for setting, allowed in (("generator", cls.generators), ("sharing", cls.sharings),
                               ("algorithm", cls.algorithms)):
            value = getattr(obj_cfg, setting)
            if allowed is not None and value not in allowed:
                raise ElectraError(f"objective.{setting} {value!r} is not supported by "
                                   f"{obj_cfg.name!r} (choose {' or '.join(map(repr, allowed))})")

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
    def generator_model_config(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig
                               ) -> ModelConfig | None:
        """The generator network this objective trains; None when it has none (an MLM alone,
        or a network-free sampler)."""
        return None

    @classmethod
    def generator_params(cls, model_cfg: ModelConfig, obj_cfg: ObjectiveConfig) -> int:
        """The generator's encoder parameters (`flops.encoder_params`), 0 without one."""
        gen = cls.generator_model_config(model_cfg, obj_cfg)
        return flops.encoder_params(gen) if gen is not None else 0

    @staticmethod
    def step_flops_breakdown(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                             seq_len: int) -> dict[str, float]:  # pragma: no cover
        """Training FLOPs (forward + backward) of one optimizer step, by component."""
        raise NotImplementedError

    def forward(self, batch: dict[str, torch.Tensor]) -> ObjectiveOutput:  # pragma: no cover
        raise NotImplementedError

    def exportable(self) -> dict[str, nn.Module]:  # pragma: no cover
        """Name -> model to write under OUT/final/NAME (e.g. discriminator, generator)."""
        raise NotImplementedError


def safe_ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def ratios(counts: dict[str, float], metrics: dict[str, Ratio]) -> dict[str, float]:
    """Each metric whose two counts are present, in `metrics`' order."""
    return {name: safe_ratio(counts[num], counts[den]) for name, (num, den) in metrics.items()
            if num in counts and den in counts}
