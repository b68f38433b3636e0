"""Critic-free algorithms end to end: remax's greedy baseline, KL loss, GSPO, dynamic sampling."""

from __future__ import annotations

import json

import pytest

from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.total_steps=2",
    "trainer.progress_bar=false",
    "trainer.save_hf=false",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "trainer.ray.object_store_memory=100000000",
]


def test_critic_free_run_with_every_option(tmp_path, shared_ray):
    cfg = load_config(
        SMALL
        + [
            f"trainer.ray.address={shared_ray}",
            f"trainer.output_dir={tmp_path}",
            "algorithm.adv_estimator=remax",
            "algorithm.use_kl_in_reward=false",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
            "actor_rollout_ref.actor.clip_ratio_low=0.0003",
            "actor_rollout_ref.actor.clip_ratio_high=0.0004",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
            "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.max_num_gen_batches=2",
            "algorithm.rollout_correction.rollout_is=token",
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert "timing_s/gen_max" in row and "timing_s/ref" in row and "actor/kl_loss" in row
        assert "critic/vf_loss" not in row and "timing_s/values" not in row
        assert 1 <= row["train/num_gen_batches"] <= 2
        # fp32 on CPU: the hf rollout samples from exactly the trainer's distribution
        assert row["training/rollout_probs_diff_max"] < 1e-4
        assert abs(row["rollout_corr/rollout_is_mean"] - 1.0) < 1e-3
        assert 0.0 <= row["train/kept_group_frac"] <= 1.0
