"""Ctrl-C during training ends the driver, its workers and the local Ray cluster it started."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_ctrl_c_leaves_no_process(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "hybridrl.trainer.main_ppo",
        f"trainer.output_dir={tmp_path}/run",
        "trainer.total_steps=1000",
        "trainer.progress_bar=false",
        "trainer.ray.object_store_memory=100000000",
    ]
    # A shell's background job ignores SIGINT; restore the default so Python raises KeyboardInterrupt.
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
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
    finally:
        if proc.poll() is None:
            proc.kill()
