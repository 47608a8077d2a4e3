"""`--precision auto|fp32|bf16|fp16`, the same for every training command: which autocast
dtype a run computes in, and, for fp16, the dynamic loss scaler that keeps small gradients
representable.

`auto` picks what the hardware computes fastest without changing what is learned:
- bf16 on a CUDA GPU with native bf16 (compute capability 8.0 and later) and on a CPU with
  AVX512-BF16 or AMX;
- fp16 with dynamic loss scaling on an older CUDA GPU (T4, V100, P100: capability below 8.0),
  where fp16 tensor cores are about 8x fp32;
- fp32 elsewhere (AVX2 CPUs, where bf16 matmuls run ~85x slower, and Apple GPUs).
The resolved value, never `auto`, is what a run's config records. Importing this module
imports no torch (the command-line parsers and configs read `PRECISIONS`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from electra.errors import ElectraError

if TYPE_CHECKING:
    import torch

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
# GradScaler's defaults (initial scale 2^16, x2 after 2,000 clean steps, /2 on an overflow).
# An fp16 run whose steps overflow this many times in a row, or at a scale of 1 or less, is
# diverging, not overflowing: its values are non-finite whatever the scale.
MAX_OVERFLOWS_IN_A_ROW = 25


def resolve_precision(requested: str | None, device: torch.device) -> str:
    """The concrete precision (fp32, bf16 or fp16) of `requested` on `device`; bf16 on a CPU
    without native bf16 is refused (`require_fast_bf16`)."""
    from electra.device import backend_of, require_fast_bf16

    if requested in (None, "auto"):
        return backend_of(device).auto_precision()
    if requested not in PRECISIONS:
        raise ElectraError(f"unknown precision {requested!r}; choose one of "
                           f"{', '.join(PRECISIONS)}")
    if requested == "bf16":
        require_fast_bf16(device)
    return requested


def device_and_precision(device: str, precision: str | None) -> tuple[torch.device, str]:
    """`--device` and `--precision` resolved together, as every command but pre-training (which
    resolves its device through torchrun's rank) takes them: bf16 on a CPU without native bf16
    is refused here, before anything is read or written."""
    from electra.device import resolve_device

    resolved = resolve_device(device)
    return resolved, resolve_precision(precision, resolved)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Autocast to the precision's dtype on `device`; a no-op for fp32."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def make_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """The dynamic loss scaler of an fp16 run (None otherwise)."""
    if precision != "fp16":
        return None
    import torch

    return torch.amp.GradScaler(device.type)
