"""SIGKILL during checkpointing: the latest checkpoint stays complete, loadable and resumable.

The crash is placed, not raced: the run's driver process is started in a session of its own with the rename
that completes step 2's checkpoint replaced by a SIGKILL of that whole process group (the driver and
anything it started). Step 2's checkpoint is then fully written under its temporary name, the worst moment
to die: a watcher polling for the temporary directory found it by luck and cost 30-210 s a run. The group is
killed at once rather than a snapshot of the driver's children: a process started after the snapshot
survived it, held the captured output open, and cost the test 2 minutes under load. The driver joins the
session's Ray cluster, whose workers Ray ends with their dead driver's job: a cluster of its own was one
more start-up that timed out on a loaded machine ("The current node timed out during startup")."""

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
    # One worker: the crash is the driver's, between a complete write and its rename (a second worker adds
    # ~5 CPU-seconds of start-up per run on a 2-core machine; resharded resumes are test_reshard's).
    "resource_pool.pools.global_pool.GPU=1",
]

# main_ppo, with the rename that would complete step 2's checkpoint turned into a crash of the whole run
CRASH_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path

from hybridrl.trainer.main_ppo import main

rename = os.rename

def rename_or_crash(src, dst, *args, **kwargs):
    if Path(src).name.startswith(".tmp-global_step_2-"):
        os.killpg(0, signal.SIGKILL)
    return rename(src, dst, *args, **kwargs)

os.rename = rename_or_crash
sys.exit(main(sys.argv[1:]))
"""


def test_sigkill_while_checkpointing_leaves_a_resumable_latest(tmp_path, shared_ray):
    out = tmp_path / "run"
    ckpt_root = out / "checkpoints"
    log = tmp_path / "crashed.log"
    with log.open("w") as sink:
        crashed = subprocess.run(
            [
                sys.executable,
                "-c",
                CRASH_BEFORE_RENAME,
                f"trainer.output_dir={out}",
                "trainer.total_steps=3",
                "trainer.save_freq=1",
                "trainer.max_ckpt_to_keep=2",
                f"trainer.ray.address={shared_ray}",
                *SMALL,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            timeout=300,
            start_new_session=True,  # its own process group, which the crash kills whole
        )
    assert crashed.returncode == -signal.SIGKILL, log.read_text()[-2000:]

    # Step 2's checkpoint is complete under its temporary name, and is not the latest: step 1 is.
    (half,) = ckpt_root.glob(".tmp-global_step_2-*")
    assert (half / STATE).is_file() and (half / "actor").is_dir()
    manager = CheckpointManager(ckpt_root, max_to_keep=2)
    latest = manager.latest()
    assert latest is not None and latest.name == "global_step_1"
    assert json.loads((latest / STATE).read_text())["step"] == 1

    # The resumed run joins the same cluster; the crashed job's workers are gone with their driver.
    resumed = [f"trainer.output_dir={out}", "trainer.total_steps=3", "trainer.save_freq=1", *SMALL]
    result = run(load_config([*resumed, f"trainer.ray.address={shared_ray}"]))
    assert len(result["history"]) == 3
    assert not any(p.name.startswith(".tmp-") for p in ckpt_root.iterdir())  # stale temporaries removed
    assert manager.latest().name == "global_step_3"
