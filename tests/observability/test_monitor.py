"""The driver's per-step resource metrics: each group's peak memory, and that peak against the plan."""

from __future__ import annotations

import pytest

from hybridrl.observability.monitor import RunMonitor


@pytest.mark.parametrize("key", ["peak_rss_gb", "gpu_max_allocated_gb"])
def test_the_largest_ranks_peak_is_set_against_the_groups_plan(key):
    monitor = RunMonitor()
    monitor.resources = {("actor", 0): {key: 1.5}, ("actor", 1): {key: 3.0}, ("critic", 0): {key: 2.0}}
    monitor.planned_peak_bytes = {"actor": 2.0 * 2**30}
    metrics = monitor.step_metrics()
    assert metrics[f"perf/actor/{key}"] == 3.0
    assert metrics["perf/actor/peak_vs_plan"] == pytest.approx(1.5)
    assert "perf/critic/peak_vs_plan" not in metrics  # no plan for it: no ratio
