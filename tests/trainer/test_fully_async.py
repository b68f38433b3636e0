"""Fully asynchronous training end to end (``async_training``): at staleness 0 without partial rollouts it is the
synchronous split layout's run; with partial rollouts it trains within its staleness bound and survives the
generation worker's SIGKILL (the generator's own logic: tests/trainer/test_rollouter.py)."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run
from hybridrl.trainer.ppo_trainer import PPOTrainer

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPLIT_1_1 = [
    "resource_pool.pools.global_pool.GPU=1",
    "+resource_pool.pools.rollout_pool.GPU=1",
    "+resource_pool.mapping.rollout=rollout_pool",
]
# What a run's own figures are not: timings, throughput, the cluster's and the hand-overs' (which fall in other
# steps: after each update here, before each generation in the synchronous run).
NOT_TRAINING = ("timing_s/", "perf/", "weight_sync/", "fully_async/", "ray/", "system/", "resources/")


def _run(tmp_path, name: str, shared_ray: str, *overrides: str) -> list[dict]:
    out = tmp_path / name
    cfg = load_config(
        [
            f"trainer.output_dir={out}",
            "trainer.progress_bar=false",
            f"trainer.ray.address={shared_ray}",
            "trainer.save_hf=false",
            "actor_rollout_ref.actor.ppo_epochs=2",
            *SPLIT_1_1,
            *overrides,
        ]
    )
    run(cfg)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _training(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(NOT_TRAINING)}


def test_staleness_zero_without_partial_rollouts_is_the_synchronous_run(tmp_path, shared_ray):
    common = ["trainer.total_steps=3", "trainer.test_freq=2", "trainer.save_freq=-1"]
    synchronous = _run(tmp_path, "sync", shared_ray, *common, "data.train_batch_size=8")
    asynchronous = _run(
        tmp_path,
        "async",
        shared_ray,
        *common,
        "async_training.enable=true",
        "async_training.staleness_threshold=0",
        "async_training.partial_rollout=false",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=1",  # x ppo_mini_batch_size 8: the synchronous run's 8 prompts
    )
    assert len(asynchronous) == 3 and "val-core/copy/reward/mean@1" in asynchronous[1]
    assert [_training(r) for r in asynchronous] == [_training(r) for r in synchronous]
    assert all(r["fully_async/max_version_gap"] == 0 for r in asynchronous)


def test_partial_rollouts_stay_within_the_bound_and_a_killed_generation_worker_is_recovered(
    tmp_path, monkeypatch, shared_ray
):
    """SIGKILL of the generation worker at the start of step 3: trainer.max_restarts restarts the groups from
    step 2's checkpoint, whose data position has the prompts then in flight generated again."""
    killed: list[int] = []
    original = PPOTrainer.step

    def step_with_a_kill(self, step, **kwargs):
        if step == 3 and not killed:
            killed.append(self.roles.rollout.group.node_info[0]["pid"])
            os.kill(killed[0], signal.SIGKILL)
        return original(self, step, **kwargs)

    monkeypatch.setattr(PPOTrainer, "step", step_with_a_kill)
    rows = _run(
        tmp_path,
        "partial",
        shared_ray,
        "trainer.total_steps=4",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "data.max_response_length=24",
        "async_training.enable=true",
        "async_training.staleness_threshold=1",
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=2",
    )
    assert killed and not psutil.pid_exists(killed[0])
    assert [r["train/restarts"] for r in rows] == [0, 0, 1, 1]
    assert all(r["fully_async/max_version_gap"] <= 1 for r in rows)
    assert all(r["fully_async/count/total_generated_samples"] >= 128 for r in rows)
    # One weight sync a step, counted on across the recovery (step 2's checkpoint holds its sync's version).
    assert [r["fully_async/current_param_version"] for r in rows] == [0, 1, 2, 3]
    summary = json.loads((tmp_path / "partial" / "summary.json").read_text())
    assert summary["restarts"] == 1
    # The trace shows the generation workers' calls beside the trainer's phases.
    events = json.loads((tmp_path / "partial" / "trace.json").read_text())
    names = {e.get("name") for e in events}
    assert {"rollout.generate", "update_actor"} <= names
