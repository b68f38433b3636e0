"""SIGKILL during checkpointing: the latest checkpoint stays complete, loadable and resumable.

The crash is placed, not raced: the run's driver process is started with the rename that completes step 2's
checkpoint replaced by a SIGKILL of the driver and every process under it (its Ray cluster and workers, as a
machine crash would). Step 2's checkpoint is then fully written under its temporary name, the worst moment
to die: a watcher polling for the temporary directory found it by luck and cost 30-210 s a run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from hybridrl.checkpoint.manager import STATE, CheckpointManager
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
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
]

# main_ppo, with the rename that would complete step 2's checkpoint turned into a crash of the whole run
CRASH_BEFORE_RENAME = """
import os, sys
from pathlib import Path

import psutil

from hybridrl.trainer.main_ppo import main

rename = os.rename

def rename_or_crash(src, dst, *args, **kwargs):
    if Path(src).name.startswith(".tmp-global_step_2-"):
        me = psutil.Process()
        for p in [*me.children(recursive=True), me]:
            p.kill()
    return rename(src, dst, *args, **kwargs)

os.rename = rename_or_crash
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_while_checkpointing_leaves_a_resumable_latest(tmp_path, shared_ray):
    out = tmp_path / "run"
    ckpt_root = out / "checkpoints"
    crashed = subprocess.run(
        [
            sys.executable,
            "-c",
            CRASH_BEFORE_RENAME,
            f"trainer.output_dir={out}",
            "trainer.total_steps=3",
            "trainer.save_freq=1",
            "trainer.max_ckpt_to_keep=2",
            *SMALL,
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-2000:]

    # Step 2's checkpoint is complete under its temporary name, and is not the latest: step 1 is.
    (half,) = ckpt_root.glob(".tmp-global_step_2-*")
    assert (half / STATE).is_file() and (half / "actor").is_dir()
    manager = CheckpointManager(ckpt_root, max_to_keep=2)
    latest = manager.latest()
    assert latest is not None and latest.name == "global_step_1"
    assert json.loads((latest / STATE).read_text())["step"] == 1

    # The crashed run had a cluster of its own (killed with it); the resumed one joins the session's.
    resumed = [f"trainer.output_dir={out}", "trainer.total_steps=3", "trainer.save_freq=1", *SMALL]
    result = run(load_config([*resumed, f"trainer.ray.address={shared_ray}"]))
    assert len(result["history"]) == 3
    assert not any(p.name.startswith(".tmp-") for p in ckpt_root.iterdir())  # stale temporaries removed
    assert manager.latest().name == "global_step_3"
