"""Where this copy of a dataset runs: which distributed rank, which DataLoader worker,
and so which shard of the data it reads; plus the seeds its shuffles use.

The global shard of a copy is ``rank * num_workers + worker_id`` out of
``world_size * num_workers``: every (rank, worker) pair reads a different shard and
together they read every record once per epoch.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.utils.data


@dataclass(frozen=True)
class ReadContext:
    """The rank and worker a dataset iterator runs in, and its torch-derived seeds."""

    rank: int
    world_size: int
    worker_id: int
    num_workers: int
    #: seed shared by all workers of one DataLoader iterator (new every epoch), or None
    #: when running in the main process (then drawn from torch's generator on demand)
    worker_base_seed: Optional[int] = None

    @property
    def shard(self) -> int:
        return self.rank * self.num_workers + self.worker_id

    @property
    def num_shards(self) -> int:
        return self.world_size * self.num_workers


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def distributed_rank(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """``(rank, world_size)``: the arguments when given, else ``torch.distributed`` when it
    is initialised, else the ``RANK``/``WORLD_SIZE`` environment variables (set by
    ``torchrun``), else ``(0, 1)``."""
    if rank is None or world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            found = dist.get_rank(), dist.get_world_size()
        else:
            env_rank, env_world = _env_int("RANK"), _env_int("WORLD_SIZE")
            found = (env_rank or 0, env_world or 1)
        rank = found[0] if rank is None else rank
        world_size = found[1] if world_size is None else world_size
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not (0 <= rank < world_size):
        raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
    return rank, world_size


def current_context(rank: Optional[int] = None, world_size: Optional[int] = None) -> ReadContext:
    """The context of the calling process (a DataLoader worker or the main process)."""
    rank, world_size = distributed_rank(rank, world_size)
    info = torch.utils.data.get_worker_info()
    if info is None:
        return ReadContext(rank, world_size, 0, 1, None)
    return ReadContext(rank, world_size, info.id, info.num_workers, info.seed - info.id)


def draw_torch_seed() -> int:
    """A 63-bit seed drawn from torch's default generator: reproducible after
    ``torch.manual_seed`` and different at every call (so at every epoch)."""
    return int(torch.empty((), dtype=torch.int64).random_().item())


def make_rng(*parts: object) -> random.Random:
    """A ``random.Random`` seeded from ``parts``; a string seed is hashed with SHA-512, so
    the same parts give the same stream in every process (no PYTHONHASHSEED effect)."""
    return random.Random(":".join(str(p) for p in parts))


__all__ = ["ReadContext", "current_context", "distributed_rank", "draw_torch_seed", "make_rng"]
