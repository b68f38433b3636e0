"""A run is not disturbed by another Ray cluster on the same machine: it starts its own cluster even where
Ray would join another (``RAY_ADDRESS``, or the newest cluster ``ray start`` left), and every Ray query
addresses the run's own cluster (Ray's helpers otherwise look for "the" local cluster and find two)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

OTHER_CLUSTER = """
import sys, time
from pathlib import Path
import ray
ray.init(num_cpus=1, include_dashboard=False, logging_level=40)
up, stop = Path(sys.argv[1]), Path(sys.argv[2])
up.write_text(ray.get_runtime_context().gcs_address)
while not stop.exists():
    time.sleep(0.2)
ray.shutdown()
"""


def test_a_run_completes_beside_another_ray_cluster(tmp_path, monkeypatch):
    up, stop = tmp_path / "up", tmp_path / "stop"
    other = subprocess.Popen([sys.executable, "-c", OTHER_CLUSTER, str(up), str(stop)])
    try:
        deadline = time.monotonic() + 120
        while not up.exists():  # the other cluster is up (a wait on a process, not a fixed sleep)
            assert other.poll() is None, "the other Ray cluster failed to start"
            assert time.monotonic() < deadline, "the other Ray cluster did not start within 120 s"
            time.sleep(0.2)
        # As after `ray start` on a shared machine: ray.init() without an address would join this cluster
        # (and refuse our num_cpus), so a local run must ask for a cluster of its own.
        monkeypatch.setenv("RAY_ADDRESS", up.read_text())
        out = tmp_path / "run"
        cfg = load_config(
            [
                f"trainer.output_dir={out}",
                "trainer.total_steps=2",
                "trainer.progress_bar=false",
                "trainer.cluster_stats_interval=1",  # the object-store query that found two clusters
                "trainer.save_freq=-1",
                "trainer.save_hf=false",
                "trainer.test_freq=-1",
                "trainer.ray.include_dashboard=false",
            ]
        )
        run(cfg)
        rows = [json.loads(line) for line in Path(out, "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2] and all("ray/object_store_used_mb" in r for r in rows)
    finally:
        stop.touch()
        other.wait(timeout=60)  # it shuts its cluster down itself
