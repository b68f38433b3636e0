"""Run a function on N local gloo ranks, processes forked from a preloaded fork server, without Ray: multi-rank
tests and benchmarks."""

from __future__ import annotations

import faulthandler
import gc
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time
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
    stacks_dir: str,
) -> None:
    # The fork server's environment and directory are those of its start: the caller's of this launch
    # are the ones wanted.
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(cwd)
    # A crash in native code (gloo, the store, a kernel) prints every thread's Python stack to stderr
    # before the process dies, so a rank's SIGSEGV/SIGABRT names where it happened.
    faulthandler.enable(all_threads=True)
    # SIGUSR1 writes every thread's stack to a file the launcher reads when the ranks pass its deadline:
    # a hang then names the line each rank waits on (pytest-timeout shows only the launcher's own stack).
    stacks = open(os.path.join(stacks_dir, f"rank{rank}.txt"), "w")  # noqa: SIM115 (open until os._exit)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
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


def run_ranks(
    fn: Callable[..., Any], world_size: int, *args: Any, device: str = "cpu", timeout_s: float | None = None
) -> None:
    """``fn(rank, world_size, *args)`` on each rank; raises if any rank fails. ``fn`` must be importable
    (a module-level function), since ranks are processes forked from a fork server, and must write its
    results itself (files): a rank leaves through ``os._exit`` once done. ``device="cuda"``: rank r on
    GPU r, NCCL. Ranks still running after ``timeout_s`` (default ``$HYBRIDRL_RANKS_TIMEOUT_S``, else no
    limit) are ended and a ``TimeoutError`` carries every rank's Python stacks."""
    if timeout_s is None and os.environ.get("HYBRIDRL_RANKS_TIMEOUT_S"):
        timeout_s = float(os.environ["HYBRIDRL_RANKS_TIMEOUT_S"])
    # The launcher hosts the rendezvous store, as torchelastic's agent does, on a port the OS picks
    # (port 0) and that stays bound until every rank is gone. Picking a free port here for rank 0
    # to bind later raced with every other socket on the machine (EADDRINUSE seen under load), and
    # a store inside rank 0 dies with rank 0 while its peers may still be connected.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False)
    multiprocessing.set_forkserver_preload(PRELOAD)
    with tempfile.TemporaryDirectory(prefix="hybridrl-ranks-") as stacks_dir:
        context = mp.start_processes(
            _entry,
            args=(fn, world_size, store.port, args, device, dict(os.environ), os.getcwd(), stacks_dir),
            nprocs=world_size,
            join=False,
            start_method="forkserver",
        )
        # join returns as each rank ends (True once all have), and raises when one failed.
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not context.join(timeout=None if deadline is None else max(0.0, deadline - time.monotonic())):
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(_end_hung_ranks(context, stacks_dir, timeout_s or 0.0))


def _end_hung_ranks(context: mp.ProcessContext, stacks_dir: str, timeout_s: float) -> str:
    """Have every live rank write its stacks, end the ranks, and say where each one was."""
    alive = [(rank, p) for rank, p in enumerate(context.processes) if p.is_alive()]
    for _, process in alive:
        os.kill(process.pid, signal.SIGUSR1)
    # The handler writes at once, from C, whatever the rank's threads do; this gives it the CPU to do so.
    multiprocessing.connection.wait([process.sentinel for _, process in alive], timeout=1.0)
    for _, process in alive:
        process.kill()
        process.join()
    report = [f"ranks {[r for r, _ in alive]} of {len(context.processes)} still running after {timeout_s:.0f} s:"]
    for rank, _ in alive:
        with open(os.path.join(stacks_dir, f"rank{rank}.txt")) as f:
            report.append(f"--- rank {rank} ---\n{f.read().strip() or '(no stack written)'}")
    return "\n".join(report)
