"""Freed host memory goes back to the operating system only past the amount worth keeping."""

from __future__ import annotations

import os
import platform

import pytest

from hybridrl.workers.host_memory import freed_bytes_held, return_freed_memory, trim_freed_memory

MB = 1 << 20
pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc" or freed_bytes_held() is None,
    reason="glibc >= 2.33 only",
)


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_freed_memory_is_kept_below_the_budget_and_given_back_above_it():
    assert return_freed_memory()
    # 1 MB blocks (below the 4 MB mmap threshold: from the heap), each followed by a kept small block,
    # so that freeing them leaves holes inside the heap instead of a free top that glibc trims itself.
    blocks, pins = [], []
    for _ in range(96):
        block = bytearray(MB)
        block[::4096] = b"x" * (MB // 4096)  # touch every page: resident
        blocks.append(block)
        pins.append(bytearray(8192))  # above Python's small-object allocator: from the heap too
    held_before = freed_bytes_held()
    del blocks
    held = freed_bytes_held()
    assert held is not None and held_before is not None and held - held_before >= 64 * MB
    rss = resident_bytes()
    assert not trim_freed_memory(keep_bytes=held + 64 * MB)  # within the budget: kept for reuse
    assert resident_bytes() > rss - 16 * MB
    assert trim_freed_memory(keep_bytes=16 * MB)  # past it: the free pages go back
    assert resident_bytes() < rss - 64 * MB
    del pins
