"""Run a function on N local gloo ranks, processes forked from a preloaded fork server, without Ray: multi-rank
tests and benchmarks."""

from __future__ import annotations

import faulthandler
import gc
import logging
import multiprocessing
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hybridrl.engine.dist import init_process_group
from hybridrl.workers.host_memory import return_freed_memory

# What every rank imports, loaded once into the fork server that forks the ranks: a spawned rank paid
# ~3 CPU-seconds importing torch and transformers, a forked one pays nothing (most multi-rank tests spend
# more on that than on their work). The server only imports: no OpenMP, gloo or CUDA thread exists in it
# to be lost in a fork.
PRELOAD = ["torch", "torch.distributed.fsdp", "transformers", "hybridrl.testing.launch", "hybridrl.engine.factory"]


def _entry(
    rank: int,
    fn: Callable[..., Any],
    world_size: int,
    port: int,
    args: tuple,
    device: str,
    environ: dict[str, str],
    cwd: str,
) -> None:
    # The fork server's environment and directory are those of its start: the caller's of this launch
    # are the ones wanted.
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    # A crash in native code (gloo, the store, a kernel) prints every thread's Python stack to stderr
    # before the process dies, so a rank's SIGSEGV/SIGABRT names where it happened.
    faulthandler.enable(all_threads=True)
    return_freed_memory()
    torch.set_num_threads(1)
    # Every rank, rank 0 included, is a client of the launcher's store (see run_ranks).
    if device == "cuda":
        torch.cuda.set_device(rank)
    init_process_group(rank, world_size, "127.0.0.1", port, torch.device(device))
    fn(rank, world_size, *args)
    # Success only: a failed rank skips this (its peers may still sit in a collective), raises, and the
    # launcher ends the others. The barrier keeps any rank from leaving, which closes its gloo pairs,
    # while a peer still uses them.
    #
    # After it no native teardown runs at all: no destroy_process_group, no garbage collection. fn's
    # engines, device meshes and pipeline stages sit in reference cycles (a schedule's loss_fn, a
    # state_dict_fn, closing over the engine) and hold every group, the default one included, so
    # destroy_process_group drops only torch's own references and frees nothing (a tp2-pp2 parity
    # rank has as many threads after it as before). The cyclic GC frees them later, at a moment
    # each rank picks alone (inside the barrier, halfway through destroy_process_group), in any
    # order of groups: joining gloo's worker and loop threads and closing pairs while the peers do
    # the same or have left. That unordered C++ teardown is what aborted ranks at interpreter exit;
    # here the kernel closes the sockets instead.
    gc.disable()
    dist.barrier()
    # Leave without interpreter finalisation (which would run that teardown: "terminate called
    # without an active exception", seen once in CI on torch 2.13). Everything the rank produced
    # is written.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn: Callable[..., Any], world_size: int, *args: Any, device: str = "cpu") -> None:
    """``fn(rank, world_size, *args)`` on each rank; raises if any rank fails. ``fn`` must be importable
    (a module-level function), since ranks are processes forked from a fork server, and must write its
    results itself (files): a rank leaves through ``os._exit`` once done. ``device="cuda"``: rank r on
    GPU r, NCCL."""
    # The launcher hosts the rendezvous store, as torchelastic's agent does, on a port the OS picks
    # (port 0) and that stays bound until every rank is gone. Picking a free port here for rank 0
    # to bind later raced with every other socket on the machine (EADDRINUSE seen under load), and
    # a store inside rank 0 dies with rank 0 while its peers may still be connected.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    multiprocessing.set_forkserver_preload(PRELOAD)
    mp.start_processes(
        _entry,
        args=(fn, world_size, store.port, args, device, dict(os.environ), os.getcwd()),
        nprocs=world_size,
        join=True,
        start_method="forkserver",
    )
