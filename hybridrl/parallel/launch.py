"""Run a function on N local gloo ranks in fresh processes, without Ray: multi-rank tests and benchmarks."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

from hybridrl.parallel.dist import destroy_process_group, free_port, init_process_group


def _entry(rank: int, fn: Callable[..., Any], world_size: int, port: int, args: tuple) -> None:
    # A crash in native code (gloo, the store, a kernel) prints every thread's Python stack to stderr
    # before the process dies, so a rank's SIGSEGV/SIGABRT names where it happened.
    faulthandler.enable(all_threads=True)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    init_process_group(rank, world_size, "127.0.0.1", port, torch.device("cpu"))
    fn(rank, world_size, *args)
    # Success only: a failed rank skips the teardown (its peers may still sit in a collective, and
    # destroying the group under them can hang), raises, and the launcher ends the others.
    # The barrier keeps any rank from closing its gloo pairs, or rank 0 its TCPStore, while a peer
    # still uses them.
    dist.barrier()
    destroy_process_group()
    # Leave without interpreter finalisation: it tears down gloo's and the store's C++ threads in an
    # unordered way that, rarely, aborts a rank whose work was complete ("terminate called without an
    # active exception", seen once in CI on torch 2.13). Everything the rank produced is written.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any) -> None:
    """``fn(rank, world_size, *args)`` on each rank; raises if any rank fails. ``fn`` must be importable
    (a module-level function), since ranks are spawned processes, and must write its results itself
    (files): a rank leaves through ``os._exit`` once done."""
    mp.start_processes(
        _entry, args=(fn, world_size, free_port(), args), nprocs=world_size, join=True, start_method="spawn"
    )
