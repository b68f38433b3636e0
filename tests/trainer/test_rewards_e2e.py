"""Reward model on its own pool (split placement), a user's reward file, and the failure policy."""

from __future__ import annotations

import json

import pytest

from hybridrl.config.loader import load_config
from hybridrl.models.reward_model import build_tiny_reward_model
from hybridrl.rewards.registry import RewardError
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.progress_bar=false",
    "trainer.save_hf=false",
    "trainer.logger=[jsonl]",
    "trainer.ray.include_dashboard=false",
    "trainer.ray.object_store_memory=100000000",
    "data.train_batch_size=8",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "algorithm.adv_estimator=grpo",
    "algorithm.use_kl_in_reward=false",
    "trainer.test_freq=-1",
]

FLAKY_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str.startswith("0"):
        raise ValueError("cannot score a leading zero")
    hit = solution_str[:1] == ground_truth[:1]
    return {"score": float(hit), "acc": hit, "first_char": solution_str[:1]}  # verl's dict, extras as metrics
"""

RAISES_ON_STEP_2 = """
calls = 0

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    global calls
    calls += 1
    if calls > 32:  # 8 prompts x 4 samples per step: the second step fails
        raise RuntimeError("reward service unavailable")
    return 0.5
"""


def test_reward_model_pool_and_custom_reward_with_failures_counted(tmp_path):
    # its own local cluster: the reward model's pool needs a CPU beyond the shared cluster's
    rm = build_tiny_reward_model(tmp_path / "rm")
    reward_file = tmp_path / "my_reward.py"
    reward_file.write_text(FLAKY_REWARD)
    out = tmp_path / "run"
    run(
        load_config(
            SMALL
            + [
                f"trainer.output_dir={out}",
                "trainer.total_steps=2",
                "reward_model.enable=true",
                f"reward_model.model.path={rm}",
                "reward_model.weight=0.5",
                "reward_model.max_length=32",
                "resource_pool.pools.rm_pool={CPU: 1}",
                "resource_pool.mapping.reward_model=rm_pool",
                f"custom_reward_function.path={reward_file}",
                "reward.on_error=fail",
                "reward.failure_score=-1.0",
                "trainer.test_freq=2",
                "actor_rollout_ref.rollout.val_kwargs.n=2",
            ]
        )
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0 <= r["reward/acc/mean"] <= 1 for r in rows) and not any("first_char" in k for k in rows[-1])
    assert 0 <= rows[-1]["val-core/copy/acc/mean@2"] <= 1  # as verl names a dict's extra keys
    assert all("reward_model/score/mean" in r for r in rows)
    assert all(r["perf/reward_model/peak_rss_gb"] > 0 for r in rows)  # the reward model's own group
    assert sum(r["reward/failed"] for r in rows) > 0
    trace = json.loads((out / "trace.json").read_text())
    groups = {e["args"]["name"] for e in trace if e.get("name") == "process_name"}
    assert {"driver", "actor_rollout", "reward_model"} <= groups


def test_failing_reward_stops_with_the_sample_named_and_keeps_the_last_step(tmp_path, shared_ray):
    reward_file = tmp_path / "raises.py"
    reward_file.write_text(RAISES_ON_STEP_2)
    out = tmp_path / "run"
    cfg = load_config(
        SMALL
        + [
            f"trainer.ray.address={shared_ray}",
            f"trainer.output_dir={out}",
            "trainer.total_steps=3",
            "trainer.save_freq=100",
            f"custom_reward_function.path={reward_file}",
            "resource_pool.pools.global_pool.GPU=1",  # the failure is the driver's scorer's: one worker will do
        ]
    )
    with pytest.raises(
        RewardError, match=r"compute_score \(from .*raises.py\) raised on sample 0 .*reward service unavailable"
    ):
        run(cfg)
    # Nothing already done is lost: step 1 was checkpointed before the error surfaced.
    assert (out / "checkpoints" / "global_step_1" / "trainer_state.json").exists()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
