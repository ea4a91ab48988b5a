"""Data parallelism under `accelerate launch` (DDP-style, any backend: gloo on CPU, NCCL on GPU).

``accelerate launch --config_file configs/accelerate/8gpu-lora.yaml -m lopd.cli train ...`` or
``torchrun --nproc_per_node N -m lopd.cli train ...`` starts one trainer per process (on a CPU,
use torchrun: ``accelerate launch --cpu`` starts a single process). Every process draws the
same step's tasks from the shared (seed, step) stream and keeps its own slice (``shard``); each rolls out, scores and back-propagates its slice, then
gradients are averaged across processes (``all_reduce_mean``) before the optimiser step, so
all replicas stay identical. The dual variable steps on the global mean of Delta. Successful
rollouts of every process go into the one SQLite bank (WAL allows concurrent writers; the
retriever re-syncs each step). Only the main process writes metrics, checkpoints and the cold
start; the others wait at a barrier and load what it wrote.

This is ``dist.strategy=ddp``. Under ``dist.strategy=fsdp`` (``lopd.fsdp``) the student and the
frozen teacher copy are sharded instead; the task shares, the bank, the dual step, the
composer's gradient average and the main process's bookkeeping stay as described here.

Simplification: the step loss is normalised per process and then averaged, which equals the
global per-trajectory mean when processes hold equally many trajectories with signal.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

import torch

T = TypeVar("T")


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without a launcher."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init_from_launcher() -> None:
    """Join the process group that `accelerate launch` / torchrun describe in the environment."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.distributed.is_initialized():
        from accelerate import PartialState

        PartialState(cpu=not torch.cuda.is_available())


def is_main() -> bool:
    return world()[0] == 0


def shard(items: Sequence[T]) -> list[T]:
    """This process's slice of a list every process holds."""
    rank, size = world()
    return list(items[rank::size])


def barrier() -> None:
    if world()[1] > 1:
        torch.distributed.barrier()


def all_reduce_mean(tensors: Sequence[torch.Tensor | None]) -> None:
    """Average tensors (gradients) across processes in place; None entries are skipped."""
    size = world()[1]
    if size == 1:
        return
    for tensor in tensors:
        if tensor is not None:
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
            tensor.div_(size)


def mean_scalar(value: float) -> float:
    """The mean of a float over processes."""
    if world()[1] == 1:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    all_reduce_mean([tensor])
    return float(tensor.item())


def _collective_device() -> torch.device:
    """Where small tensors for collectives live: this process's GPU under NCCL, else the CPU."""
    from lopd.models import resolve_device

    nccl = torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl"
    return resolve_device("cuda" if nccl else "cpu")


def sync_gradients(parameters: Sequence[torch.nn.Parameter]) -> None:
    """Average ``.grad`` across processes; a missing grad counts as zero (same on all ranks)."""
    if world()[1] == 1:
        return
    for param in parameters:
        if param.grad is None:
            param.grad = torch.zeros_like(param)
    all_reduce_mean([p.grad for p in parameters])
