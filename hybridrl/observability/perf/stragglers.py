"""Per-rank call durations and detection of the rank that holds a worker group back.

Why: every SPMD call waits for its slowest rank, so one slow rank (thermal throttling, a noisy
neighbour, an unlucky long sequence) sets the step time; naming it is the first debugging step.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Straggler:
    """The slowest rank of one call, and the median of the other ranks it was compared with."""

    call: str
    rank: int
    seconds: float
    median: float
    factor: float  # threshold it exceeded, echoed in the warning

    @property
    def ratio(self) -> float:
        return self.seconds / self.median if self.median > 0 else math.inf


def find_stragglers(
    durations: Mapping[str, Sequence[float]], factor: float, min_seconds: float = 0.05
) -> list[Straggler]:
    """Flag, per call, the slowest rank if it took more than ``factor`` x the median and more
    than ``min_seconds`` (sub-``min_seconds`` calls are scheduling noise).

    The median is taken over the *other* ranks: the straggler must not inflate its own
    reference, and with two ranks an inclusive median is their mean, which no rank can exceed
    by 2x. Non-finite entries (ranks that did not report) are ignored; one rank is never flagged.
    """
    found: list[Straggler] = []
    for call, seconds in durations.items():
        ranked = [(float(s), rank) for rank, s in enumerate(seconds) if math.isfinite(s)]
        if len(ranked) < 2:
            continue
        slowest, rank = max(ranked, key=lambda item: item[0])
        others = [s for s, r in ranked if r != rank]
        median = statistics.median(others)
        if slowest > min_seconds and slowest > factor * median:
            found.append(Straggler(call=call, rank=rank, seconds=slowest, median=median, factor=factor))
    return found


def format_warning(role: str, straggler: Straggler, config_key: str = "trainer.straggler_factor") -> str:
    """One-line warning naming role, rank, call, time and ratio, and the knob that set the threshold."""
    s = straggler
    return (
        f"role {role} rank {s.rank} took {s.seconds:.2f} s in {s.call}, "
        f"{s.ratio:.1f}x the median {s.median:.2f} s ({config_key}={s.factor})"
    )
