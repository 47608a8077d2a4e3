"""DDP set-up under `torchrun`: NCCL on GPUs, gloo on CPUs; a no-op for a single process."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from electra.device import backend_of, resolve_device
from electra.errors import ElectraError


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str = "auto", bf16: bool = False) -> DistInfo:
    """This process's rank and device (`bf16`: refused on a CPU without native bf16, by
    every rank alike, before any process group exists)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, bf16, index=local_rank)
    backend = backend_of(dev)
    if world_size > 1 and backend.ddp_backend is None:
        raise ElectraError(f"torchrun with --device {dev.type}: torch.distributed has no "
                           "backend for it; run one process, or use --device cpu")
    backend.select(dev)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend=backend.ddp_backend)
    return DistInfo(rank, world_size, local_rank, dev)


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.enabled:
        values = values.to(info.device)
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def all_reduce_max(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Element-wise maximum over ranks: a flag set on any rank is set on all."""
    if info.enabled:
        values = values.to(info.device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return values


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def agree_on_failure(message: str | None, info: DistInfo | None) -> str | None:
    """A barrier that also tells every process whether one failed: each passes its error
    message (None if it did not fail), and every process gets the first one (by rank), so all
    stop with the same line instead of waiting on a process that has gone."""
    if info is None or not info.enabled:
        return message
    messages: list[str | None] = [None] * info.world_size
    dist.all_gather_object(messages, message)
    return next((m for m in messages if m is not None), None)


def cleanup(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()
