"""Where to run: `--device auto|cpu|cuda|mps` for every command, and the bf16 check.

`auto` takes a CUDA GPU, else an Apple GPU (`mps`), else the CPU. Nothing on a training path
calls a CUDA-only API unguarded, so the same code runs on an Apple GPU; it is tested here only
as far as a CPU can (device choice, refusal, device-generic code).

On a CPU without native bf16 (e.g. AVX2-only AMD EPYC), PyTorch runs bf16 matmuls in a
reference kernel, ~85x slower than fp32 (0.7 vs 60 GFLOP/s on one thread), so `--bf16` there
is refused with the reason instead of running for days. ELECTRA_ALLOW_SLOW_BF16=1 overrides
(to test bf16 code paths on such a machine).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from electra.errors import ElectraError

ALLOW_SLOW_BF16 = "ELECTRA_ALLOW_SLOW_BF16"
_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def _cpuinfo_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith(("flags", "Features"))
            for flag in line.partition(":")[2].split()}


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo where there is one (`platform` gives only
    x86_64 on Linux), for benchmark reports."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_has_fast_bf16() -> bool:
    """bf16 matmuls at fp32 speed or better: the CPU has AVX512-BF16 or AMX-BF16, or oneDNN
    (which PyTorch routes bf16 matmuls to when it can) supports bf16 on it (AVX512 cores, Arm
    with BF16). Either answer from PyTorch suffices; /proc/cpuinfo is the fallback."""
    try:
        caps = torch.cpu.get_capabilities()
        if any(caps.get(flag, False) for flag in _BF16_CPU_FLAGS):
            return True
    except (AttributeError, RuntimeError):
        pass
    try:
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return True
    except (AttributeError, RuntimeError):
        pass
    return bool(_cpuinfo_flags() & set(_BF16_CPU_FLAGS))


def slow_bf16_reason(device: torch.device) -> str | None:
    """Why bf16 autocast on `device` would be very slow, or None (CUDA, a CPU with native
    bf16, or ELECTRA_ALLOW_SLOW_BF16=1)."""
    if device.type != "cpu" or os.environ.get(ALLOW_SLOW_BF16) == "1" or cpu_has_fast_bf16():
        return None
    return (f"this CPU has no native bf16 (no AVX512-BF16 or AMX; PyTorch's CPU capability is "
            f"{torch.backends.cpu.get_cpu_capability()}), where bf16 matmuls run ~85x slower "
            "than fp32 (0.7 vs 60 GFLOP/s)")


def require_fast_bf16(device: torch.device) -> None:
    """Refuse bf16 autocast (`--precision bf16`, `--bf16`) on a CPU without native bf16 (unless
    ELECTRA_ALLOW_SLOW_BF16=1)."""
    reason = slow_bf16_reason(device)
    if reason is not None:
        raise ElectraError(f"--precision bf16: {reason}; train in fp32 (--precision fp32 or "
                           f"auto), or set {ALLOW_SLOW_BF16}=1 to run anyway")


def mps_available() -> bool:
    """An Apple GPU through Metal Performance Shaders (macOS on Apple silicon)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str = "auto", bf16: bool = False, index: int = 0) -> torch.device:
    """`--device` as a torch device (`index`: the CUDA device, torchrun's LOCAL_RANK); with
    `bf16`, also the bf16 check."""
    if name == "auto":
        name = ("cuda" if torch.cuda.is_available() else "mps" if mps_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ElectraError("--device cuda: CUDA is not available here")
    if name == "mps" and not mps_available():
        raise ElectraError("--device mps: no Apple GPU (Metal Performance Shaders) here; use "
                           "--device cpu, or auto")
    device = torch.device("cuda", index) if name == "cuda" else torch.device(name)
    if bf16:
        require_fast_bf16(device)
    return device


def to_device(batch: dict, device: torch.device) -> dict:
    """A (possibly nested, for multi-task batches) dict of host tensors on `device`. On CUDA
    each tensor goes through pinned memory with a non-blocking copy, so the transfer is queued
    behind the GPU work already launched instead of stalling the host until it is done (a
    pageable copy is synchronous); pinning a fresh copy also means the source can be reused at
    once. Elsewhere a plain `.to` (on CPU, the same tensors: no copy)."""
    if device.type != "cuda":
        return {k: to_device(v, device) if isinstance(v, dict) else v.to(device)
                for k, v in batch.items()}
    return {k: to_device(v, device) if isinstance(v, dict)
            else (v if v.is_cuda else v.pin_memory()).to(device, non_blocking=True)
            for k, v in batch.items()}
