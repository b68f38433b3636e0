"""Liveness: which ranks of a group still answer while a long call waits on them.

A whole-call timeout cannot tell a 70B generate from a rank that was stopped, so the driver does not rely
on one alone. While it waits on a call it asks each rank, at most once per interval, a question the rank
answers on its control thread (``Worker.alive``), beside the call's own thread: a rank busy in a long call
or waiting in a collective (native code that releases the interpreter) answers, a stopped, swapping or
wedged process does not. The driver times each question with its own clock (no skew between nodes).

Asked from the driver rather than beaten into a board actor (as before 2026-12-07): that actor was one more
Ray worker process per run (~0.8 CPU-seconds to start, on a 2-core machine), for the same answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import ray


class Liveness:
    """The driver's view of one group's ranks: each gets at most one outstanding question, a new one at
    most every ``timeout_s / 3`` after the last answer; a question unanswered past ``timeout_s`` names its
    rank silent. A rank that has not answered yet is starting (importing, or queued for its node: start-up
    has its own timeout) and is not named."""

    def __init__(self, actors: Sequence[Any], timeout_s: float) -> None:
        self.actors = list(actors)
        self.timeout_s = timeout_s
        self.interval_s = timeout_s / 3
        self._asked: dict[int, tuple[Any, float]] = {}  # rank -> (the pending answer, when it was asked)
        self._answered: dict[int, float] = {}

    def silent(self) -> dict[int, float]:
        """Ask the ranks that are due; return those whose question waited longer than the timeout, with its
        age in seconds. A rank whose process is gone answers with an error at once: the call's own wait
        reports that, not this."""
        now = time.monotonic()
        pending = [ref for ref, _ in self._asked.values()]
        done = set(ray.wait(pending, num_returns=len(pending), timeout=0, fetch_local=False)[0]) if pending else set()
        silent: dict[int, float] = {}
        for rank, actor in enumerate(self.actors):
            asked = self._asked.get(rank)
            if asked is not None and asked[0] in done:
                del self._asked[rank]
                self._answered[rank] = now
                asked = None
            if asked is None:
                if now - self._answered.get(rank, -math.inf) >= self.interval_s:
                    self._asked[rank] = (actor.alive.remote(), now)
            elif rank in self._answered and now - asked[1] > self.timeout_s:
                silent[rank] = now - asked[1]
        return silent
