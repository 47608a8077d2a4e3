"""Objective registry: `build_objective(config)` by `config.objective.name`."""

from __future__ import annotations

from collections.abc import Callable

from electra.config import ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.objectives.base import Objective, ObjectiveOutput, metrics_from_counts
from electra.objectives.electra import ElectraObjective
from electra.objectives.masking import SpecialIds

REGISTRY: dict[str, Callable[..., Objective]] = {
    "electra": ElectraObjective,
}


def build_objective(model_cfg: ModelConfig, obj_cfg: ObjectiveConfig,
                    special: SpecialIds | None = None) -> Objective:
    if obj_cfg.name not in REGISTRY:
        raise ElectraError(f"unknown objective {obj_cfg.name!r}; choose one of "
                           f"{', '.join(REGISTRY)}")
    return REGISTRY[obj_cfg.name](model_cfg, obj_cfg, special)


__all__ = ["Objective", "ObjectiveOutput", "SpecialIds", "build_objective",
           "metrics_from_counts"]
