"""Faults a long run meets, each answered with one line and nothing lost: a stopped rank, a reward function
that never returns, a disk that fills up at checkpoint time. (A killed worker's recovery is tested with
exact resume in tests/checkpoint/test_resume.py; a SIGKILL during a checkpoint write in test_crash.py; a
second Ray cluster in tests/trainer/test_interrupt.py; two runs on one directory in test_run_lock.py.)"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal

import psutil
import pytest

from hybridrl.checkpoint.manager import CheckpointManager
from hybridrl.trainer.main_ppo import main
from hybridrl.trainer.ppo_trainer import PPOTrainer

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.progress_bar=false",
    "trainer.save_hf=false",
    "trainer.logger=[jsonl]",
    "trainer.ray.include_dashboard=false",
    "trainer.ray.object_store_memory=100000000",
    "trainer.test_freq=-1",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "critic.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "critic.ppo_micro_batch_size_per_gpu=16",
]

# Where the fault is the driver's (a reward, a checkpoint write), one worker: a second adds ~5 CPU-seconds of
# start-up a run on a 2-core machine and nothing to what the test shows.
ONE_WORKER = "resource_pool.pools.global_pool.GPU=1"


def run_main(caplog, args):
    """main()'s exit code and its ERROR lines, in order."""
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="hybridrl"):
        code = main(SMALL + args)
    return code, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_stopped_rank_is_named_in_the_first_error(tmp_path, caplog, monkeypatch, shared_ray):
    stopped = []
    original = PPOTrainer.step

    def step_with_a_stop(self, step, **kwargs):
        if step == 2 and not stopped:
            stopped.append(self.roles.groups()[0].node_info[1]["pid"])
            os.kill(stopped[0], signal.SIGSTOP)
        return original(self, step, **kwargs)

    monkeypatch.setattr(PPOTrainer, "step", step_with_a_stop)
    try:
        code, errors = run_main(
            caplog,
            [
                f"trainer.ray.address={shared_ray}",
                f"trainer.output_dir={tmp_path}/run",
                "trainer.total_steps=3",
                "trainer.max_restarts=0",
                "trainer.ray.liveness_timeout_s=10",
            ],
        )
    finally:
        for pid in stopped:  # shutdown kills it; make sure, whatever happened
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).kill()
    assert code == 1
    assert errors[0].startswith("WorkerStuckError: ") and "rank(s) [1] stopped answering" in errors[0], errors
    assert "trainer.ray.liveness_timeout_s" in errors[0] and len(errors) == 1, errors


HANGS = """
import time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(3600)
"""


def reward_processes_left() -> list[psutil.Process]:
    """This test process's reward children still running. Other children (the session's Ray cluster) may end
    while they are listed: a zombie or a vanished process is not a reward process left running."""
    left = []
    for process in psutil.Process().children(recursive=True):
        try:
            if "hybridrl.rewards.processes" in process.cmdline():
                left.append(process)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return left


def test_a_reward_that_never_returns_stops_the_run_at_its_deadline(tmp_path, caplog, shared_ray):
    reward_file = tmp_path / "hangs.py"
    reward_file.write_text(HANGS)
    code, errors = run_main(
        caplog,
        [
            f"trainer.ray.address={shared_ray}",
            f"trainer.output_dir={tmp_path}/run",
            "trainer.total_steps=2",
            f"custom_reward_function.path={reward_file}",
            "reward.timeout_s=2",
            ONE_WORKER,
        ],
    )
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith("RewardError: Reward function compute_score (from ")
    assert "did not return within reward.timeout_s=2 s on sample 0" in errors[0]
    assert not reward_processes_left()


def test_a_full_disk_at_checkpoint_time_names_the_path_and_keeps_the_last_checkpoint(
    tmp_path, caplog, monkeypatch, shared_ray
):
    original = CheckpointManager.commit

    def commit_on_a_full_disk(self, tmp, step, state):
        if step == 4:  # the driver's write of the step's state hits ENOSPC, as a full disk would
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp / "trainer_state.json"))
        return original(self, tmp, step, state)

    monkeypatch.setattr(CheckpointManager, "commit", commit_on_a_full_disk)
    out = tmp_path / "run"
    args = [
        f"trainer.ray.address={shared_ray}",
        f"trainer.output_dir={out}",
        "trainer.total_steps=4",
        "trainer.save_freq=2",
        ONE_WORKER,
    ]
    code, errors = run_main(caplog, args)
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith("CheckpointError: Writing the step 4 checkpoint under ")
    assert "No space left on device" in errors[0] and "global_step_2, is intact" in errors[0]
    root = out / "checkpoints"
    assert CheckpointManager(root, None).latest() == root / "global_step_2"
    assert not any(p.name.startswith(".tmp-") for p in root.iterdir())  # the half-written one is gone

    monkeypatch.setattr(CheckpointManager, "commit", original)  # space freed: the same command resumes
    code, errors = run_main(caplog, args)
    assert code == 0 and not errors
    assert CheckpointManager(root, None).latest() == root / "global_step_4"
