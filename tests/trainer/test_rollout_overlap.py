"""Generation on a rollout pool of its own, overlapped with training (one step off-policy): the default
run learns its task (the hand-over itself: tests/generation/test_weight_channel.py)."""

from __future__ import annotations

import json

import pytest

from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SPLIT_1_1 = [
    "resource_pool.pools.global_pool.GPU=1",
    "+resource_pool.pools.rollout_pool.GPU=1",
    "+resource_pool.mapping.rollout=rollout_pool",
]


def test_overlapped_training_learns_the_default_task(tmp_path, shared_ray):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            "trainer.progress_bar=false",
            f"trainer.ray.address={shared_ray}",
            "actor_rollout_ref.rollout.overlap=true",
            *SPLIT_1_1,
            # The default run's preset with 2 epochs a step (a third costs 30% more a step here, and is the
            # default run's for its last steps' curve, which tests/trainer/test_default_run.py holds), 80 steps:
            # the 10-step mean is 0.08 at the start and 0.47 over steps 70-79 (0.96 by step 150; measured
            # 2026-12-07), so a gain of 0.25 is well inside 80 steps.
            "actor_rollout_ref.actor.ppo_epochs=2",
            "trainer.total_steps=80",
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 80
    assert all("timing_s/weight_handover" in r for r in rows[:-1])  # before each prefetched generation
    # What moved and how fast (the model's bytes, in fp32 on CPU), in every step whose hand-over moved weights:
    # all but the last and the one after step 50's validation, which handed the new weights over already.
    weights_mb = sum(v.numel() * v.element_size() for v in read_weights(tmp_path / "actor_hf").values()) / 2**20
    moved = [r for r in rows if "weight_sync/mb" in r]
    assert len(moved) == 80 - 2 and all(r["weight_sync/gb_per_s"] > 0 for r in moved)
    assert all(abs(r["weight_sync/mb"] - weights_mb) < 1e-6 * weights_mb for r in moved)
    assert "training/rollout_probs_diff_max" not in rows[-1]  # old log-probs are the behaviour policy's
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gain"] >= 0.25, summary  # main_ppo's "the reward rose"
    assert read_weights(tmp_path / "actor_hf")
