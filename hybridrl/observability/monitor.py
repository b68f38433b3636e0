"""Where the time goes, collected on the driver: the timeline, straggler warnings, resource use.

Worker groups hand every call's per-rank results here; the trainer hands its own phases. Nothing here
changes what is trained.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hybridrl.observability.perf.stragglers import find_stragglers, format_warning
from hybridrl.observability.tracking.trace import TraceWriter

logger = logging.getLogger(__name__)

DRIVER = "driver"


class RunMonitor:
    def __init__(
        self,
        trace_path: Path | None = None,
        straggler_factor: float = 2.0,
        straggler_min_seconds: float = 0.05,
        continue_trace: bool = False,
    ) -> None:
        self.trace = TraceWriter(trace_path, append=continue_trace) if trace_path is not None else None
        self.straggler_factor = straggler_factor
        self.straggler_min_seconds = straggler_min_seconds
        self.straggler_warnings: list[str] = []
        self.resources: dict[tuple[str, int], dict[str, float]] = {}
        #: each worker group's planned peak bytes per rank (``hybridrl plan``'s model), set by the job
        self.planned_peak_bytes: dict[str, float] = {}
        self._step_stragglers = 0
        self._transfer_bytes = 0

    # -- worker side ---------------------------------------------------------------------------
    def on_call(self, group: str, call: str, results: list[Any], transfer_bytes: int = 0) -> None:
        """Record one group call: per-rank spans into the trace, the slowest rank against the median,
        and the serialized bytes the call moved through Ray's object store (shards out, results back)."""
        self._transfer_bytes += transfer_bytes
        for rank, result in enumerate(results):
            if self.trace is not None:
                self.trace.span(group, rank, call, result.span.start, result.span.end)
                for sub in result.sub_spans:
                    self.trace.span(group, rank, sub.name, sub.start, sub.end)
            self.resources[(group, rank)] = result.resources
        if len(results) > 1:
            durations = {call: [r.span.end - r.span.start for r in results]}
            for straggler in find_stragglers(durations, self.straggler_factor, self.straggler_min_seconds):
                message = format_warning(group, straggler)
                logger.warning("Straggler: %s", message)
                self.straggler_warnings.append(message)
                self._step_stragglers += 1

    @staticmethod
    def sub_span_timings(results: list[Any]) -> dict[str, float]:
        """``timing_s/<sub-span>`` as the slowest rank's, since the phase waits for every rank."""
        out: dict[str, float] = {}
        for result in results:
            for sub in result.sub_spans:
                key = f"timing_s/{sub.name}"
                out[key] = max(out.get(key, 0.0), sub.end - sub.start)
        return out

    # -- driver side ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str, timings: dict[str, float]) -> Iterator[None]:
        """Time a driver phase into ``timings`` (seconds, accumulated) and the trace."""
        start_wall, start = time.time(), time.perf_counter()
        try:
            yield
        finally:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - start
            if self.trace is not None:
                self.trace.span(DRIVER, 0, name, start_wall, time.time(), thread_name="trainer")

    def step_metrics(self) -> dict[str, float]:
        """Resource use per worker group (peak memory, CPU/GPU utilisation) and straggler count."""
        metrics: dict[str, float] = {
            "perf/stragglers": float(self._step_stragglers),
            "ray/transfer_mb": self._transfer_bytes / 2**20,
        }
        self._step_stragglers = 0
        self._transfer_bytes = 0
        groups = sorted({g for g, _ in self.resources})
        for group in groups:
            rows = [r for (g, _), r in sorted(self.resources.items()) if g == group]
            for key in sorted({k for r in rows for k in r}):
                values = [r[key] for r in rows if key in r]
                agg = max(values) if ("gb" in key or key.startswith("peak")) else sum(values) / len(values)
                metrics[f"perf/{group}/{key}"] = agg
            measured = metrics.get(f"perf/{group}/gpu_max_allocated_gb", metrics.get(f"perf/{group}/peak_rss_gb"))
            if measured is not None and self.planned_peak_bytes.get(group):
                # the ratio a drift of the memory model shows in (the "gb" keys are GiB)
                metrics[f"perf/{group}/peak_vs_plan"] = measured * 2**30 / self.planned_peak_bytes[group]
        if self.trace is not None:
            self.trace.flush()
        return metrics

    def mark(self, name: str) -> None:
        """A moment on the whole timeline (a leg of the run starts)."""
        if self.trace is not None:
            self.trace.instant(name, time.time())

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()
