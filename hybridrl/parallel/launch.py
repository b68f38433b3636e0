"""Run a function on N local gloo ranks in fresh processes, without Ray: multi-rank tests and benchmarks."""

from __future__ import annotations

import os
from typing import Any, Callable

import torch.multiprocessing as mp

from hybridrl.parallel.dist import free_port


def _entry(rank: int, fn: Callable[..., Any], world_size: int, port: int, args: tuple) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """``fn(rank, world_size, *args)`` on each rank; raises if any rank fails. ``fn`` must be importable
    (a module-level function), since ranks are spawned processes."""
    mp.start_processes(_entry, args=(fn, world_size, free_port(), args), nprocs=world_size,
                       join=True, start_method="spawn")
