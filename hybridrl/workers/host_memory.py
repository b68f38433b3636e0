"""Host memory that is freed goes back to the operating system (glibc's malloc tuned once per process).

glibc serves blocks above its mmap threshold with mmap and unmaps them on free, but after each such free
it raises the threshold to that block's size (up to 32 MB). From then on every block of 1-32 MB (an FSDP
layer's gathered parameters, a handed-over tensor, activations of a mid-size model) comes from heap
arenas that free() keeps: a rank's RSS climbs with every phase and stays there. Measured on a 243M
model on 4 CPU workers: +1.6 GB per rank by the end of the first GRPO step (4.3 GB instead of 2.6 GB).

Two settings fix it. The threshold is fixed (which turns the dynamic adjustment off) at 4 MB, so larger
blocks are mmapped and go back at once; and ``trim_freed_memory`` hands the free pages of the heap arenas
back after every phase (``malloc_trim``: it also releases free pages inside the arenas, not only at their
top) once they hold more than ``KEEP_FREED_BYTES`` (256 MB) free: a few hundred MB per process is less
than the page faults of taking it back every phase cost (W1's update ran 15% slower). The threshold is a trade: at 1 MB (this module's first setting) every tensor just above it costs a
fresh mmap and its page faults, and on the throughput benchmark's model (bench/w1.py: 1 MB hidden-state
tensors) forward and backward took 45% longer than with glibc's defaults (8% at 4 MB); at 32 MB a 243M
model's forward-only phases peaked 48% above the memory model on 4 workers (7% at 4 MB, bench/memory.py).
``MALLOC_MMAP_THRESHOLD_`` in the environment sets the threshold too, but only for processes started with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import platform
from collections.abc import Callable
from typing import cast

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 4 << 20
#: Freed memory a process may keep between phases for the next one to reuse without page faults.
KEEP_FREED_BYTES = 256 << 20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at 4 MB in this process; False where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not ok:
        logger.warning("mallopt(M_MMAP_THRESHOLD) failed: freed host memory may stay with this process.")
    return ok


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc >= 2.33): totals over every arena, in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _MallInfo2
    return cast(Callable[[], _MallInfo2], libc.mallinfo2)


def freed_bytes_held() -> int | None:
    """Bytes the heap arenas hold free (freed, not yet given back); None where glibc cannot say."""
    info = _mallinfo2()
    return None if info is None else int(info().fordblks)


def trim_freed_memory(keep_bytes: int = KEEP_FREED_BYTES) -> bool:
    """Give the heap's free pages back to the operating system (after a phase: a few milliseconds) when
    the arenas hold more than ``keep_bytes`` free; True if it trimmed. Below that it is not worth it: the
    next phase would fault the same pages back in (W1's update: 140 MB, 36k page faults, ~15% of its time)."""
    libc = _glibc()
    if libc is None:
        return False
    held = freed_bytes_held()
    if held is not None and held < keep_bytes:
        return False
    libc.malloc_trim(0)
    return True
