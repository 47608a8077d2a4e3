"""Objectives by name: `build_objective(model_cfg, obj_cfg)` picks `obj_cfg.name`'s class.

The registry is `electra.config.OBJECTIVES` (name -> "module:Class" in this package and the
objective's config defaults; kept there so that configs and the command line know the names
and defaults without importing torch). Each module is imported only when used. What an
objective class declares is listed in `objectives.base`; see docs/objectives.md.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from electra.config import OBJECTIVES, ModelConfig, ObjectiveConfig
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


def load_target(target: str) -> Any:
    """A registry line's "module:name" in this package (`electra.config`'s registries name
    their implementations so, to stay torch-free), imported on first use."""
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(f"electra.objectives.{module_name}"), attr)


def objective_class(name: str) -> type[Objective]:
    if name not in REGISTRY:
        raise ElectraError(f"unknown objective {name!r}; choose one of {', '.join(REGISTRY)}")
    target = REGISTRY[name].target
    try:
        return load_target(target)
    except ModuleNotFoundError as e:
        if e.name != f"electra.objectives.{target.split(':')[0]}":
            raise
        raise ElectraError(f"objective {name!r} is not implemented yet") from None


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


def _all_metrics() -> dict[str, Ratio]:
    """Every registered objective's metrics; one name must mean one ratio everywhere. Not
    cached: the registry may grow after the first log line (an objective registered at run
    time), and the classes are imported once anyway."""
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


__all__ = ["REGISTRY", "Objective", "ObjectiveContext", "ObjectiveOutput", "SpecialIds",
           "build_objective", "load_target", "metrics_from_counts", "objective_class",
           "objective_step_flops", "resolved"]
