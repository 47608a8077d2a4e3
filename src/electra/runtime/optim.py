"""AdamW with ELECTRA's weight-decay exclusions and learning-rate schedule."""

from __future__ import annotations

import inspect

import torch
from torch import nn

from electra.config import TrainConfig


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
    """`fused=True` when every parameter is on CUDA: one kernel launch per step for all
    parameters instead of several per parameter group and op. Elsewhere torch's default, so
    CPU training is unchanged (torch has a fused CPU AdamW too, but it rounds differently)."""
    fusable = bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)
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


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, cfg.warmup_steps, cfg.steps))
