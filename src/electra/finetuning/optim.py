"""Fine-tuning optimizer: AdamW (eps 1e-6, weight decay 0), linear warm-up over 10% of steps
times linear decay to 0, and layer-wise learning-rate decay (Table 5.2).

Two depth conventions, both giving parameter p the rate lr * decay ** depth(p):

- "dissertation" (default), section 3 (BAM, "Training Details"): "If layer 0 is the NN layer
  closest to the output, the learning rate for a particular layer d is BASE_LR * alpha^d".
  The task head is layer 0, Transformer layer i (0-based from the input, of L) is layer L - i,
  the embeddings (and their projection) are layer L + 1.
- "official" (google-research/electra `_get_layer_lrs`): embeddings depth 0, layer i depth
  i + 1, the task head n_layers + 2, and rate lr * decay ** (n_layers + 2 - depth). Depth
  n_layers + 1 is skipped (no parameter has it), so every encoder layer and the embeddings get
  one extra factor of `decay` compared with the dissertation's rule: top layer lr * decay**2
  (not decay), embeddings lr * decay**(L + 2).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from electra.errors import ElectraError
from electra.runtime.optim import adamw_impl

LR_DECAY_STYLES = ("dissertation", "official")


def parameter_depth(name: str, num_layers: int, style: str = "dissertation") -> int:
    """The exponent of `decay` for parameter `name` of a FinetuneModel."""
    if style not in LR_DECAY_STYLES:
        raise ElectraError(f"layer-wise LR style must be one of {LR_DECAY_STYLES}, got {style!r}")
    extra = 1 if style == "official" else 0  # the official code's skipped depth n_layers + 1
    if name.startswith(("task_head.", "task_heads.")):  # one head, or one per task (BAM)
        return 0
    m = re.match(r"encoder\.layers\.(\d+)\.", name)
    if m:
        return num_layers - int(m.group(1)) + extra
    if name.startswith(("encoder.embeddings.", "encoder.embeddings_project.")):
        return num_layers + 1 + extra
    if name.startswith("encoder.final_norm."):  # the modern architecture's, on the last layer
        return 1 + extra
    raise ElectraError(f"no layer-wise learning rate rule for parameter {name!r}")


def layerwise_groups(model: nn.Module, lr: float, decay: float, num_layers: int,
                     style: str = "dissertation", weight_decay: float = 0.0) -> list[dict]:
    """One param group per (depth, decayed-or-not) with its own lr."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = parameter_depth(name, num_layers, style)
        # As BERT/ELECTRA: no weight decay on biases and LayerNorm.
        no_wd = name.endswith(".bias") or "LayerNorm" in name or "_norm" in name
        key = (depth, no_wd)
        if key not in groups:
            groups[key] = {"params": [], "names": [], "lr": lr * decay**depth,
                           "weight_decay": 0.0 if no_wd else weight_decay}
        groups[key]["params"].append(param)
        groups[key]["names"].append(name)
    return list(groups.values())


def build_optimizer(model: nn.Module, lr: float, decay: float, num_layers: int, total_steps: int,
                    warmup_fraction: float = 0.1, style: str = "dissertation",
                    weight_decay: float = 0.0, eps: float = 1e-6,
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    groups = layerwise_groups(model, lr, decay, num_layers, style, weight_decay)
    for g in groups:
        g.pop("names")
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=eps,
                            weight_decay=weight_decay,
                            **adamw_impl([p for g in groups for p in g["params"]]))
    warmup = int(round(warmup_fraction * total_steps))

    def scale(step: int) -> float:
        # As the official optimizer: linear decay to 0 over all steps times a linear warm-up
        # ramp, shifted one step so the first update is not a no-op.
        ramp = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        return max(0.0, 1.0 - step / total_steps) * ramp

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, scale)
