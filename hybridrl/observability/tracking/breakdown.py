"""Where a step's time goes: the mean of each top-level phase and its share of the mean step time.

Pure arithmetic over metric rows (one dict per step, as in ``metrics.jsonl``), so the console can print
it every few steps, the run can write it at the end and ``hybridrl report`` can render it, all from one
definition.

A phase is any ``timing_s/<name>`` key except those in :data:`TOP_LEVEL_EXCLUDED`. Phases run one
after another, so their sum is nearly the step; the remainder is reported as ``other`` (collation and
key selection on the driver). New driver phases (checkpointing, validation, ...) show up on their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TIMING_PREFIX = "timing_s/"

#: ``timing_s/*`` keys that are not top-level phases, so adding them to the phases would count time
#: twice: the whole step itself, and sub-phases measured on the workers that sit *inside* another
#: phase (``weight_sync`` and ``generate_worker`` are both parts of ``gen``).
TOP_LEVEL_EXCLUDED: frozenset[str] = frozenset(
    {
        "timing_s/step",
        "timing_s/weight_sync",
        "timing_s/generate_worker",
    }
)

#: Known phases in step order; phases not listed here follow, alphabetically, so tables stay stable.
PHASE_ORDER: tuple[str, ...] = (
    "data",
    "weight_handover",
    "gen",
    "gen_max",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
)

Breakdown = list[tuple[str, float, float]]


def as_number(value: Any) -> float | None:
    """``value`` as a float, or None when it is not a number (None, strings, lists, bools).

    Metric rows come from JSON (non-finite floats are written as null) or straight from the trainer
    (torch / numpy scalars), so every consumer needs the same filter.
    """
    if isinstance(value, bool) or value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError):  # a tensor with more than one element
            return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def top_level_phases(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ``timing_s/*`` keys present in ``rows`` that are top-level phases, in the stable order."""
    present = {key for row in rows for key in row if key.startswith(TIMING_PREFIX) and key not in TOP_LEVEL_EXCLUDED}
    known = [TIMING_PREFIX + name for name in PHASE_ORDER if TIMING_PREFIX + name in present]
    return known + sorted(present - set(known))


def mean_of(rows: Sequence[Mapping[str, Any]], key: str) -> float:
    """Mean of ``key`` over all ``rows``, a missing (or null) value counting as 0.

    A phase that did not run in a step took no time in it, so this keeps phase means additive:
    their sum compares directly with the mean step time.
    """
    if not rows:
        return 0.0
    return sum(as_number(row.get(key)) or 0.0 for row in rows) / len(rows)


def _window(rows: Sequence[Mapping[str, Any]], skip_first: int) -> Sequence[Mapping[str, Any]]:
    # When skipping would leave nothing (a run of one step), use every row: a table with the warm-up
    # included says more than no table.
    kept = rows[max(0, skip_first) :]
    return kept if kept else rows


def phase_breakdown(rows: Sequence[Mapping[str, Any]], skip_first: int = 0) -> Breakdown:
    """``[(phase, mean seconds, % of mean step time), ..., ("other", s, %), ("step", s, 100.0)]``.

    ``skip_first`` leaves out the first steps, which pay one-time costs (compilation, allocator
    warm-up, the first weight hand-over); if that would leave no step, all steps are used. Without
    any ``timing_s/step`` the step is taken as the sum of the phases. Empty ``rows`` give ``[]``.
    """
    window = _window(rows, skip_first)
    if not window:
        return []
    phases = [(key, mean_of(window, key)) for key in top_level_phases(window)]
    phase_sum = sum(seconds for _, seconds in phases)
    has_step = any(as_number(row.get("timing_s/step")) is not None for row in window)
    step = mean_of(window, "timing_s/step") if has_step else phase_sum

    def pct(seconds: float) -> float:
        return 100.0 * seconds / step if step > 0 and math.isfinite(step) else 0.0

    table = [(key[len(TIMING_PREFIX) :], seconds, pct(seconds)) for key, seconds in phases]
    other = step - phase_sum
    table.append(("other", other, pct(other)))
    table.append(("step", step, 100.0))
    return table


def sub_phase_means(rows: Sequence[Mapping[str, Any]], skip_first: int = 0) -> list[tuple[str, float]]:
    """Mean seconds of the worker-side sub-phases present (those inside another phase), by name."""
    window = _window(rows, skip_first)
    names = sorted(key for key in TOP_LEVEL_EXCLUDED - {"timing_s/step"} if any(key in row for row in window))
    return [(key[len(TIMING_PREFIX) :], mean_of(window, key)) for key in names]


def format_breakdown(rows: Sequence[Any], skip_first: int = 0) -> str:
    """The breakdown as a fixed-width text table (phase | seconds | % of step), as the bench prints it.

    ``rows`` is either the output of :func:`phase_breakdown` or metric rows (dicts), in which case
    the breakdown is computed here with ``skip_first``, so callers holding the history need one call.
    """
    table: Breakdown
    if rows and all(isinstance(row, Mapping) for row in rows):
        table = phase_breakdown(rows, skip_first)
    else:
        table = [(str(name), float(seconds), float(share)) for name, seconds, share in rows]
    if not table:
        return "(no steps to break down)"
    width = max(20, max(len(name) for name, _, _ in table) + 2)
    lines = [f"{'phase':<{width}}{'seconds':>10}{'% of step':>12}", "-" * (width + 22)]
    for name, seconds, share in table:
        if name == "step":
            lines.append("-" * (width + 22))
        lines.append(f"{name:<{width}}{seconds:>10.3f}{share:>11.1f}%")
    return "\n".join(lines)
