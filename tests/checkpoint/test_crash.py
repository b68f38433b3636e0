"""SIGKILL during checkpointing: the latest checkpoint stays complete, loadable and resumable."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys

import psutil
import pytest

from hybridrl.checkpoint.manager import CheckpointManager
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.progress_bar=false",
    "trainer.logger=[jsonl]",
    "trainer.ray.include_dashboard=false",
    "trainer.ray.object_store_memory=100000000",
    "trainer.test_freq=-1",
    "trainer.save_hf=false",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "critic.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "critic.ppo_micro_batch_size_per_gpu=16",
]


def test_sigkill_while_checkpointing_leaves_a_resumable_latest(tmp_path, shared_ray):
    out = tmp_path / "run"
    ckpt_root = out / "checkpoints"
    cmd = [
        sys.executable,
        "-m",
        "hybridrl.trainer.main_ppo",
        f"trainer.output_dir={out}",
        "trainer.total_steps=200",
        "trainer.save_freq=1",
        "trainer.max_ckpt_to_keep=2",
        *SMALL,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    killed_mid_write = False
    try:
        for line in proc.stdout:  # blocks until the first checkpoint is complete
            if "Saved checkpoint" in line:
                break
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        # Watch for the next checkpoint's temporary directory and kill everything the moment it exists.
        for _ in range(200_000):
            if any(p.name.startswith(".tmp-") for p in ckpt_root.iterdir()):
                killed_mid_write = True
                break
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        psutil.wait_procs(family, timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    manager = CheckpointManager(ckpt_root, max_to_keep=2)
    latest = manager.latest()
    assert latest is not None and (latest / "trainer_state.json").exists()
    step = json.loads((latest / "trainer_state.json").read_text())["step"]
    if killed_mid_write:  # the half-written one is never the latest
        assert any(p.name.startswith(".tmp-") for p in ckpt_root.iterdir())

    # The crashed run had a cluster of its own (killed with it, as a machine crash would); the resumed one
    # joins the session's.
    resumed = [f"trainer.output_dir={out}", f"trainer.total_steps={step + 1}", "trainer.save_freq=1", *SMALL]
    result = run(load_config([*resumed, f"trainer.ray.address={shared_ray}"]))
    assert len(result["history"]) == step + 1
    assert not any(p.name.startswith(".tmp-") for p in ckpt_root.iterdir())  # stale temporaries removed
    assert manager.latest().name == f"global_step_{step + 1}"
