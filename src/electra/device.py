"""Where to run: `--device auto|cpu|cuda|mps` for every command, the bf16 check, and the device
kinds as records.

Each device kind is a `Backend` in `BACKENDS` (cpu, cuda, mps): whether it is here, what
`--precision auto` picks on it, whether bf16 is native, its RNG state, its torch.distributed
backend, whether it replays captured graphs, how host batches reach it. Code asks the record of
a device (`backend_of`), never its name, so another kind (XPU, ROCm under its own name) is one
record (docs/extending.md, "Add a backend"). `auto` takes the first available kind of
`AUTO_ORDER`: a CUDA GPU, else an Apple GPU (`mps`), else the CPU. It is tested here only as far
as a CPU can (device choice, refusal, device-generic code).

On a CPU without native bf16 (e.g. AVX2-only AMD EPYC), PyTorch runs bf16 matmuls in a
reference kernel, ~85x slower than fp32 (0.7 vs 60 GFLOP/s on one thread), so `--bf16` there
is refused with the reason instead of running for days. ELECTRA_ALLOW_SLOW_BF16=1 overrides
(to test bf16 code paths on such a machine).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def mps_available() -> bool:
    """An Apple GPU through Metal Performance Shaders (macOS on Apple silicon)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


@dataclass(frozen=True)
class Backend:
    """One device kind: what the code asks about hardware, in one place."""

    name: str  # torch's device type
    available: Callable[[], bool]
    # What `--precision auto` picks (electra.precision), and whether bf16 runs at fp32's speed
    # or better (where it does not, bf16 is refused: `require_fast_bf16`).
    auto_precision: Callable[[], str]
    native_bf16: Callable[[], bool]
    # Its devices' RNG state, saved in checkpoints and restored on resume (None: torch's
    # default generator covers it).
    get_rng: Callable[[], Any] | None = None
    set_rng: Callable[[Any], None] | None = None
    # torch.distributed's backend on it (None: one process only), and whether each process
    # owns one device by index (DDP device_ids, the current device).
    ddp_backend: str | None = None
    indexed: bool = False
    set_device: Callable[[torch.device], None] | None = None  # makes a device the current one
    # A captured step replays as a graph (CUDA graphs; torch.compile's "reduce-overhead").
    graphs: bool = False
    # Host batches go through pinned memory with non-blocking copies.
    pinned_copies: bool = False
    # AdamW as one fused kernel for all parameters (torch's `fused=True`).
    fused_optimizer: bool = False
    # torch's dropout and SDPA kernels are the fast ones; False: electra's own (the CPU's).
    fused_kernels: bool = True
    # CVT's BiLSTM through torch's packed-sequence kernel (cuDNN), faster there than
    # electra's loop over time steps with both directions batched (`electra.cvt.bilstm`).
    packed_lstm: bool = False

    def select(self, device: torch.device) -> None:
        """Make `device` this process's current device, where the kind has one."""
        if self.set_device is not None:
            self.set_device(device)


def _cuda_auto_precision() -> str:
    return "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"


# The checks are looked up when called (lambdas), so that tests can stand in for hardware.
BACKENDS: dict[str, Backend] = {
    "cpu": Backend("cpu", lambda: True,
                   lambda: "bf16" if cpu_has_fast_bf16() else "fp32",
                   lambda: cpu_has_fast_bf16(), ddp_backend="gloo", fused_kernels=False),
    "cuda": Backend("cuda", lambda: torch.cuda.is_available(), _cuda_auto_precision,
                    lambda: True, get_rng=lambda: torch.cuda.get_rng_state_all(),
                    set_rng=lambda state: torch.cuda.set_rng_state_all(state),
                    ddp_backend="nccl", indexed=True,
                    set_device=lambda device: torch.cuda.set_device(device), graphs=True,
                    pinned_copies=True, fused_optimizer=True, packed_lstm=True),
    "mps": Backend("mps", lambda: mps_available(), lambda: "fp32", lambda: True,
                   get_rng=lambda: torch.mps.get_rng_state(),
                   set_rng=lambda state: torch.mps.set_rng_state(state)),
}
AUTO_ORDER = ["cuda", "mps", "cpu"]  # what `--device auto` tries, in order


def backend_of(device: torch.device | str) -> Backend:
    """The record of `device`'s kind."""
    kind = torch.device(device).type
    if kind not in BACKENDS:
        raise ElectraError(f"no backend record for device type {kind!r} (known: "
                           f"{', '.join(BACKENDS)}); docs/extending.md, add a backend")
    return BACKENDS[kind]


def register_backend(backend: Backend, auto_before: str | None = "cpu") -> None:
    """Add a device kind; `--device auto` tries it before `auto_before` (None: not at all)."""
    BACKENDS[backend.name] = backend
    if auto_before is not None and backend.name not in AUTO_ORDER:
        AUTO_ORDER.insert(AUTO_ORDER.index(auto_before), backend.name)


def slow_bf16_reason(device: torch.device) -> str | None:
    """Why bf16 autocast on `device` would be very slow, or None (a GPU, a CPU with native
    bf16, or ELECTRA_ALLOW_SLOW_BF16=1)."""
    if os.environ.get(ALLOW_SLOW_BF16) == "1" or backend_of(device).native_bf16():
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


_UNAVAILABLE = {"cuda": "CUDA is not available here",
                "mps": "no Apple GPU (Metal Performance Shaders) here; use --device cpu, or auto"}


def resolve_device(name: str = "auto", bf16: bool = False, index: int = 0) -> torch.device:
    """`--device` as a torch device (`index`: the device of a kind with one per process,
    torchrun's LOCAL_RANK); with `bf16`, also the bf16 check."""
    if name == "auto":
        name = next(kind for kind in AUTO_ORDER if BACKENDS[kind].available())
    backend = backend_of(name)
    if not backend.available():
        raise ElectraError(f"--device {name}: "
                           + _UNAVAILABLE.get(name, f"no {name} device is available here"))
    device = torch.device(name, index) if backend.indexed else torch.device(name)
    if bf16:
        require_fast_bf16(device)
    return device


def to_device(batch: dict, device: torch.device) -> dict:
    """A (possibly nested, for multi-task batches) dict of host tensors on `device`. On CUDA
    each tensor goes through pinned memory with a non-blocking copy, so the transfer is queued
    behind the GPU work already launched instead of stalling the host until it is done (a
    pageable copy is synchronous); pinning a fresh copy also means the source can be reused at
    once. Elsewhere a plain `.to` (on CPU, the same tensors: no copy)."""
    if not backend_of(device).pinned_copies:
        return {k: to_device(v, device) if isinstance(v, dict) else v.to(device)
                for k, v in batch.items()}
    return {k: to_device(v, device) if isinstance(v, dict)
            else (v if v.is_cuda else v.pin_memory()).to(device, non_blocking=True)
            for k, v in batch.items()}
