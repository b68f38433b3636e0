"""Host memory that is freed goes back to the operating system (glibc's malloc tuned once per process).

glibc serves blocks above its mmap threshold with mmap and unmaps them on free, but after each such free
it raises the threshold to that block's size (up to 32 MB). From then on every block of 1-32 MB (an FSDP
layer's gathered parameters, a handed-over tensor, activations of a mid-size model) comes from heap
arenas that free() keeps: a rank's RSS climbs with every phase and stays there. Measured on a 243M
model on 4 CPU workers: +1.6 GB per rank by the end of the first GRPO step (4.3 GB instead of 2.6 GB).

Two settings fix it. The threshold is fixed (which turns the dynamic adjustment off) at 4 MB, so larger
blocks are mmapped and go back at once; and ``trim_freed_memory`` hands the free pages of the heap arenas
back after every phase (``malloc_trim``: it also releases free pages inside the arenas, not only at their
top). The threshold is a trade: at 1 MB (this module's first setting) every tensor just above it costs a
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

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 4 << 20


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at 32 MB in this process; False where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not ok:
        logger.warning("mallopt(M_MMAP_THRESHOLD) failed: freed host memory may stay with this process.")
    return ok


def trim_freed_memory() -> None:
    """Give the heap's free pages back to the operating system (after a phase: a few milliseconds)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
