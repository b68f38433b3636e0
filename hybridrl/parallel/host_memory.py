"""Host memory that is freed goes back to the operating system (glibc's malloc tuned once per process).

glibc serves blocks above its mmap threshold with mmap and unmaps them on free, but after each such free
it raises the threshold to that block's size (up to 32 MB). From then on every block of 1-32 MB (an FSDP
layer's gathered parameters, a handed-over tensor, activations of a mid-size model) comes from heap
arenas that free() keeps: a rank's RSS climbs with every phase and stays there. Measured on a 243M
model on 4 CPU workers: +1.6 GB per rank by the end of the first GRPO step (4.3 GB instead of 2.6 GB).
A fixed threshold (setting it turns the dynamic adjustment off) returns every block of 1 MB or more at
once; the price is an mmap per large allocation, which is small next to the work done on such a tensor.
``MALLOC_MMAP_THRESHOLD_`` in the environment does the same, but only for processes started with it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


def return_freed_memory() -> bool:
    """Fix glibc's mmap threshold at 1 MB in this process; False where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not ok:
        logger.warning("mallopt(M_MMAP_THRESHOLD) failed: freed host memory may stay with this process.")
    return ok
