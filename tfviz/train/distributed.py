"""Multi-process (DistributedDataParallel) plumbing (which device: ``tfviz.device``).

Under ``torchrun --nproc_per_node=N`` every process runs the same command; ``init_distributed``
reads RANK / WORLD_SIZE / LOCAL_RANK from the environment and joins the process group
(nccl on GPUs, gloo on CPU). Rank 0 logs, evaluates and saves; every rank draws the same global
batch from the same seeded generator and trains on its own contiguous slice of it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..device import cuda_available


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world > 1


def current() -> Dist:
    """This process's place in the process group (rank 0 of 1 when not distributed)."""
    if dist.is_available() and dist.is_initialized():
        return Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    return Dist()


def init_distributed(device: str = "auto") -> Dist:
    """Join the process group torchrun describes in the environment (no-op for one process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1 or (dist.is_available() and dist.is_initialized()):
        return current()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gpu = device in ("auto", "cuda") and cuda_available()
    if gpu:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if gpu else "gloo")
    return current()


def shutdown_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
