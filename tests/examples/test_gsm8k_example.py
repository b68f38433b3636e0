"""The GSM8K example config runs for a few steps on a tiny saved Llama model and fixture parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.examples.gsm8k_fixture import fixture_parquet, tiny_llama

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_gsm8k_example_runs(tmp_path, shared_ray):
    from hybridrl.trainer.main_ppo import main

    model = tiny_llama(tmp_path / "llama")
    train, test = fixture_parquet(tmp_path)
    out = tmp_path / "run"
    code = main(
        [
            "--config",
            str(ROOT / "examples/ppo_gsm8k.yaml"),
            f"actor_rollout_ref.model.path={model}",
            f"data.train_files={train}",
            f"data.val_files={test}",
            f"trainer.output_dir={out}",
            "trainer.total_steps=2",
            "trainer.test_freq=1",
            "trainer.progress_bar=false",
            f"trainer.ray.address={shared_ray}",
            "resource_pool.pools.global_pool.GPU=2",
            "data.train_batch_size=4",
            "data.max_prompt_length=160",
            "data.max_response_length=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "critic.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.actor.precision=fp32",
            "critic.precision=fp32",
            "actor_rollout_ref.actor.fsdp.mixed_precision=false",
            "critic.fsdp.mixed_precision=false",
        ]
    )
    assert code == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # validation before training (verl's default), then 2 steps
    assert all("val-core/openai/gsm8k/reward/mean@1" in r for r in rows)
    generations = (out / "val_generations" / "step_2.jsonl").read_text().splitlines()
    assert len(generations) == 4 and json.loads(generations[0])["prompt"].startswith("<|user|>What is")
