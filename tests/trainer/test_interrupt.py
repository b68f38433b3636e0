"""Ctrl-C during training ends the driver, its workers and the local Ray cluster it started, and nothing else.

The run starts beside another Ray cluster on the same machine, as after ``ray start`` on a shared machine
(``RAY_ADDRESS`` names the other one): it starts its own cluster even where Ray would join that one, every Ray
query addresses the run's own cluster (Ray's helpers otherwise look for "the" local cluster and find two), and
Ctrl-C leaves the other cluster running. One run proves both: each was a run of its own before, ~25 s of a
2-core CI machine apiece."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

OTHER_CLUSTER = """
import sys, time
from pathlib import Path
import ray
ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level=40)
up, stop = Path(sys.argv[1]), Path(sys.argv[2])
up.write_text(ray.get_runtime_context().gcs_address)
while not stop.exists():
    time.sleep(0.2)
ray.shutdown()
"""


def test_ctrl_c_leaves_no_process_and_another_cluster_running(tmp_path):
    up, stop = tmp_path / "up", tmp_path / "stop"
    other = subprocess.Popen([sys.executable, "-c", OTHER_CLUSTER, str(up), str(stop)])
    proc = None
    try:
        deadline = time.monotonic() + 120
        while not up.exists():  # the other cluster is up (a wait on a process, not a fixed sleep)
            assert other.poll() is None, "the other Ray cluster failed to start"
            assert time.monotonic() < deadline, "the other Ray cluster did not start within 120 s"
            time.sleep(0.2)
        others = psutil.Process(other.pid).children(recursive=True)
        cmd = [
            sys.executable,
            "-m",
            "hybridrl.trainer.main_ppo",
            f"trainer.output_dir={tmp_path}/run",
            "trainer.total_steps=1000",
            "trainer.progress_bar=false",
            "trainer.cluster_stats_interval=1",  # the object-store query that found two clusters
            "trainer.ray.object_store_memory=100000000",
            "resource_pool.pools.global_pool.GPU=1",  # a worker process to end is enough
        ]
        # ray.init() without an address would join the other cluster (and refuse our num_cpus): a local run
        # must ask for a cluster of its own. A shell's background job ignores SIGINT; restore the default so
        # Python raises KeyboardInterrupt.
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "RAY_ADDRESS": up.read_text()},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks until training is under way; no sleeps
            if "step 2 |" in line:
                break
        else:
            pytest.fail(f"training never started; exit code {proc.wait()}")
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert any("raylet" in p.name() for p in descendants)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=120)[0]
        assert proc.returncode == 130, rest
        assert "Interrupted" in rest
        _, alive = psutil.wait_procs(descendants, timeout=60)
        assert not alive, [p.info if hasattr(p, "info") else p for p in alive]

        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert len(rows) >= 2 and all("ray/object_store_used_mb" in r for r in rows)
        assert other.poll() is None and all(p.is_running() for p in others)  # the other cluster is untouched
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        stop.touch()
        other.wait(timeout=60)  # it shuts its cluster down itself
    assert other.returncode == 0
