"""Objectives by name: `build_objective(model_cfg, obj_cfg)` picks `obj_cfg.name`'s class.

The registry is `electra.config.OBJECTIVES` (name -> "module:Class" in this package; kept there
so that configs and the command line know the names without importing torch). Each module is
imported only when used. What an objective class declares is listed in `objectives.base`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib

from electra import flops
from electra.config import OBJECTIVES, ModelConfig, ObjectiveConfig, get_preset, merge
from electra.errors import ElectraError
from electra.objectives.base import (
    Objective,
    ObjectiveContext,
    ObjectiveOutput,
    Ratio,
    ratios,
    resolved,
)
from electra.objectives.masking import SpecialIds

REGISTRY = OBJECTIVES


def objective_class(name: str) -> type[Objective]:
    if name not in REGISTRY:
        raise ElectraError(f"unknown objective {name!r}; choose one of {', '.join(REGISTRY)}")
    module_name, class_name = REGISTRY[name].split(":")
    try:
        module = importlib.import_module(f"electra.objectives.{module_name}")
    except ModuleNotFoundError as e:
        if e.name != f"electra.objectives.{module_name}":
            raise
        raise ElectraError(f"objective {name!r} is not implemented yet") from None
    return getattr(module, class_name)


def build_objective(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                    special: SpecialIds | None = None,
                    context: ObjectiveContext | None = None) -> Objective:
    context = context or ObjectiveContext()
    if special is not None:
        context = dataclasses.replace(context, special=special)
    return objective_class(obj_cfg.name)(model_cfg, resolved(obj_cfg), context)


def objective_step_flops(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig, batch_size: int,
                         seq_len: int) -> dict[str, float]:
    """Training FLOPs of one optimizer step of this objective, by component."""
    return objective_class(obj_cfg.name).step_flops_breakdown(
        model_cfg, resolved(obj_cfg), batch_size, seq_len)


@functools.cache
def _all_metrics() -> dict[str, Ratio]:
    """Every registered objective's metrics; one name must mean one ratio everywhere."""
    out: dict[str, Ratio] = {}
    for name in REGISTRY:
        for metric, ratio in objective_class(name).metrics.items():
            if out.setdefault(metric, ratio) != ratio:
                raise ElectraError(f"objective {name!r} defines metric {metric!r} as "
                                   f"{ratio}, another objective as {out[metric]}")
    return out


def metrics_from_counts(counts: dict[str, float], objective: str | None = None
                        ) -> dict[str, float]:
    """The logged ratios of summed `ObjectiveOutput.counts`: those `objective` declares, or
    (None) those of any objective whose counts are present."""
    metrics = objective_class(objective).metrics if objective is not None else _all_metrics()
    return ratios(counts, metrics)


def main_flops(preset: str, objective: str, steps: int | None, batch_size: int | None,
               seq_len: int | None, vocab_size: int = 30522,
               overrides: dict | None = None) -> dict:
    """The `electra flops` command: a preset's compute budget as a JSON-able dict.

    Missing values come from the preset (Table 5.1): BERT's step count for "mlm" and ELECTRA's
    otherwise, its batch size and sequence length, mask rate and generator multiplier.
    `overrides` are objective config fields (e.g. {"generator": "unigram"}); the count is the
    objective class's own `step_flops_breakdown`, the same the training loop logs.
    """
    p = get_preset(preset)
    if vocab_size < 1:
        raise ElectraError(f"vocab size must be positive, got {vocab_size}")
    cls = objective_class(objective)
    model = dataclasses.replace(p.model, vocab_size=vocab_size)
    obj_cfg = ObjectiveConfig(name=objective, mask_prob=p.mask_prob,
                              generator_multiplier=p.generator_multiplier)
    merge(obj_cfg, dict(overrides or {}), where="objective")
    obj_cfg.validate()
    if steps is None:
        steps = p.bert_steps if objective == "mlm" else p.electra_steps
    batch_size = p.batch_size if batch_size is None else batch_size
    seq_len = p.seq_len if seq_len is None else seq_len
    flops.check_counting(model, steps, batch_size, seq_len)
    breakdown = cls.step_flops_breakdown(model, obj_cfg, batch_size, seq_len)
    per_step = sum(breakdown.values())
    return {
        "preset": preset,
        "objective": objective,
        "steps": steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "train_flops": per_step * steps,
        "infer_flops": flops.encoder_flops(model, seq_len),
        "infer_flops_with_head": flops.encoder_flops(model, seq_len)
        + flops.binary_head_flops(model, seq_len),
        "params": flops.encoder_params(model),
        "generator_params": cls.generator_params(model, obj_cfg),
        "train_flops_per_step": per_step,
        "output_frac": flops.output_frac_for(obj_cfg.mask_prob),
        "objective_config": dataclasses.asdict(obj_cfg),
        "breakdown": breakdown,
    }


__all__ = ["REGISTRY", "Objective", "ObjectiveContext", "ObjectiveOutput", "SpecialIds",
           "build_objective", "main_flops", "metrics_from_counts", "objective_class",
           "objective_step_flops", "resolved"]
