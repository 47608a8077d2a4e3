"""Objective registry: `build_objective(config)` by `config.objective.name`.

Each objective lives in its own module and is imported only when used. An objective class
provides `__init__(model_cfg, obj_cfg, context)`, `forward(batch) -> ObjectiveOutput`,
`exportable()`, and the static `step_flops_breakdown(model_cfg, obj_cfg, batch_size, seq_len)`
that counts what it computes (section 5.2.2 rules, primitives in `electra.flops`).
"""

from __future__ import annotations

import dataclasses
import importlib

from electra.config import OBJECTIVE_NAMES, ModelConfig, ObjectiveConfig
from electra.errors import ElectraError
from electra.objectives.base import (
    Objective,
    ObjectiveContext,
    ObjectiveOutput,
    metrics_from_counts,
    resolved,
)
from electra.objectives.masking import SpecialIds

# name -> "module:Class" (relative to electra.objectives).
REGISTRY: dict[str, str] = {
    "electra": "electra:ElectraObjective",
    "electra-15": "electra:ElectraObjective",
    "mlm": "mlm:MlmObjective",
    "replace-mlm": "replace_mlm:ReplaceMlmObjective",
    "all-tokens-mlm": "replace_mlm:AllTokensMlmObjective",
    "electric": "electric:ElectricObjective",
    "electra-tt": "electric:ElectraTwoTowerObjective",
    "teams": "teams:TeamsObjective",
}
assert set(REGISTRY) == set(OBJECTIVE_NAMES)


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


__all__ = ["Objective", "ObjectiveContext", "ObjectiveOutput", "SpecialIds", "build_objective",
           "metrics_from_counts", "objective_class", "objective_step_flops", "resolved"]
