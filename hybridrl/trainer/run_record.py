"""How long a run took and where it was resumed, across every process that worked on it.

A resumed run is a new process; without this its ``summary.json`` and report would time only the last
part. The record travels in each checkpoint's driver state, so a resume continues it: an earlier process
counts up to its last checkpoint (work after that was lost and is done again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunRecord:
    wall_before: float = 0.0  # seconds of earlier processes, up to the checkpoint this one resumed from
    legs: list[int] = field(default_factory=list)  # the step each leg started after (0 = from scratch)
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def resumed(cls, state: dict[str, Any] | None, started: float) -> RunRecord:
        """The record of a run resumed from a checkpoint's driver ``state`` (None: a fresh run), this process
        having started at ``started`` (``time.perf_counter``)."""
        saved = (state or {}).get("run") or {}
        return cls(float(saved.get("wall_s", 0.0)), [int(s) for s in saved.get("legs", [])], started)

    def begin_leg(self, start_step: int) -> None:
        self.legs.append(start_step)

    def wall_s(self) -> float:
        return self.wall_before + time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s(), "legs": list(self.legs)}
