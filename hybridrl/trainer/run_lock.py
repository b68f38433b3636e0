"""One live run per output directory: a second run on the same ``trainer.output_dir`` would resume from the
first one's checkpoints while it still writes them, and both would append to the same metrics.

An advisory ``flock`` on ``<output_dir>/.hybridrl.lock``: the kernel drops it when its process ends,
however it ends, so a stale lock never blocks a new run. (Like any flock, it does not reach across
machines on network file systems that do not support it.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from pathlib import Path

LOCK_NAME = ".hybridrl.lock"


class RunLockError(RuntimeError):
    """Another live run holds the output directory."""


@contextlib.contextmanager
def hold_run_lock(output_dir: Path) -> Iterator[None]:
    """Hold ``output_dir``'s run lock for the block, or fail at once naming the run that holds it."""
    fd = os.open(output_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "a process"
        os.close(fd)
        raise RunLockError(
            f"Another hybridrl run ({holder}) is using trainer.output_dir={output_dir}: wait for it to end, "
            f"or give this run another trainer.output_dir."
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
