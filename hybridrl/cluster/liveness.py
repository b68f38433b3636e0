"""Heartbeats: which ranks of a group are alive while a long call waits on them.

A whole-call timeout cannot tell a 70B generate from a rank that was stopped, so the driver does not rely
on one alone. Every worker process beats from a thread of its own (``workers.heartbeat``) into this board,
a tiny actor that stamps each beat with its own clock (no skew between nodes); a rank stuck in a
collective still beats, a stopped or wedged process does not. While a call is pending past the liveness
timeout the driver asks the board which ranks went silent and names them in the first error.
"""

from __future__ import annotations

import time
from typing import Any

import ray


class HeartbeatBoard:
    def __init__(self) -> None:
        self._last: dict[tuple[str, int], float] = {}

    def beat(self, group: str, rank: int) -> None:
        self._last[(group, rank)] = time.monotonic()

    def silent(self, group: str, ranks: list[int], older_than_s: float) -> dict[int, float]:
        """Ranks of ``group`` whose last beat is older than ``older_than_s``, with the seconds since it."""
        now = time.monotonic()
        ages = {rank: now - self._last[(group, rank)] for rank in ranks if (group, rank) in self._last}
        return {rank: age for rank, age in ages.items() if age > older_than_s}

    def forget(self, group: str) -> None:
        self._last = {key: t for key, t in self._last.items() if key[0] != group}


def start_board() -> Any:
    """The run's board: no CPU reserved, so it fits beside every bundle; async-free, its calls are tiny."""
    return ray.remote(num_cpus=0, max_restarts=0)(HeartbeatBoard).remote()
