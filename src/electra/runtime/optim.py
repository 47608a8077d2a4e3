"""AdamW with ELECTRA's weight-decay exclusions and learning-rate schedule."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from electra.config import TrainConfig
from electra.device import backend_of


def no_decay(param: nn.Parameter) -> bool:
    """Biases and LayerNorm weights are not decayed (official: exclude_from_weight_decay=
    ["LayerNorm", "layer_norm", "bias"]); in our models those are exactly the 1-D tensors."""
    return param.ndim < 2


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    decay, plain = [], []
    for param in model.parameters():
        if param.requires_grad:
            (plain if no_decay(param) else decay).append(param)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_eps, **adamw_impl(decay + plain))


def adamw_impl(params: list[nn.Parameter]) -> dict[str, bool]:
    """`fused=True` when every parameter is on a device whose backend fuses the optimizer
    (CUDA): one kernel launch per step for all parameters instead of several per parameter
    group and op. Elsewhere torch's default, so CPU training is unchanged (torch has a fused CPU
    AdamW too, but it rounds differently)."""
    fusable = bool(params) and all(backend_of(p.device).fused_optimizer
                                   and p.is_floating_point() for p in params)
    if fusable and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        return {"fused": True}
    return {}


def lr_multiplier(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up times linear decay to 0 at `total_steps`.

    As ELECTRA's official model/optimization.py: polynomial_decay(power=1) of the *global*
    step, multiplied by min(1, step / warmup_steps). (BERT's optimization.py replaces the
    decayed rate by step / warmup_steps during warm-up instead; ELECTRA's is lower there by
    the factor 1 - step / total_steps.)
    """
    warmup = min(1.0, step / warmup_steps) if warmup_steps else 1.0
    return warmup * max(0.0, 1.0 - step / total_steps)


class Schedule:
    """`lr_multiplier` whose end can move: warm-up, then linear decay to 0 at `total`.

    A run on a time budget learns how many steps it can afford only once it has timed some,
    and a resumed one may find itself on a slower machine, so its plan can change (`replan`).
    The multiplier stays continuous: from the step of the change it goes linearly from its
    value there to the end of warm-up (the next step, where the new warm-up has already
    passed) and to 0 at the new total. Until a change it is exactly
    `lr_multiplier`. A callable object: LambdaLR saves and restores its attributes with the
    scheduler's state, so a resumed run continues the same plan."""

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup = warmup_steps
        self.total = total_steps
        self.changed_at: int | None = None  # the step of the last re-plan
        self.warm_there = 1.0  # the warm-up and decay factors at that step
        self.decay_there = 1.0

    def __call__(self, step: int) -> float:
        if self.changed_at is None:
            return lr_multiplier(step, self.warmup, self.total)
        return self.warm_factor(step) * self.decay_factor(step)

    def warm_factor(self, step: int) -> float:
        if self.changed_at is None:
            return min(1.0, step / self.warmup) if self.warmup else 1.0
        end = max(self.warmup, self.changed_at + 1)  # a warm-up already passed ends next step
        if step >= end:
            return 1.0
        ramp = (step - self.changed_at) / (end - self.changed_at)
        return self.warm_there + (1.0 - self.warm_there) * ramp

    def decay_factor(self, step: int) -> float:
        if self.changed_at is None:
            return max(0.0, 1.0 - step / self.total)
        left = self.total - self.changed_at
        return self.decay_there * max(0.0, (self.total - step) / left) if left > 0 else 0.0

    def replan(self, step: int, total_steps: int, warmup_steps: int | None = None) -> None:
        """From `step` on, end at `total_steps` (and warm up until `warmup_steps`)."""
        self.warm_there, self.decay_there = self.warm_factor(step), self.decay_factor(step)
        self.changed_at = step
        self.total = total_steps
        if warmup_steps is not None:
            self.warmup = warmup_steps


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, Schedule(cfg.warmup_steps, cfg.steps))


def schedule_of(scheduler: torch.optim.lr_scheduler.LambdaLR) -> Schedule:
    """The `Schedule` a scheduler from `build_scheduler` follows (all groups share one)."""
    return scheduler.lr_lambdas[0]
