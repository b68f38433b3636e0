"""Run a function on N gloo ranks in fresh processes (no Ray): the multi-rank test tier."""

from __future__ import annotations

import os
import socket

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, fn, world_size: int, port: int, args: tuple) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(fn, world_size: int, *args) -> None:
    """``fn(rank, world_size, *args)`` on each rank; raises if any rank fails."""
    mp.start_processes(_entry, args=(fn, world_size, _free_port(), args), nprocs=world_size,
                       join=True, start_method="spawn")
