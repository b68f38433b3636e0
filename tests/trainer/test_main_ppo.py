"""End to end: a short PPO run on a local Ray cluster, as the main job runs it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from hybridrl.config.loader import load_config
from hybridrl.trainer.main_ppo import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_short_run_writes_metrics_changes_weights_and_exports(tmp_path):
    import ray

    out = tmp_path / "run"
    cfg = load_config([f"trainer.output_dir={out}", "trainer.total_steps=3", "trainer.progress_bar=false",
                       "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                       "critic.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
                       "critic.ppo_micro_batch_size_per_gpu=8", "trainer.ray.object_store_memory=100000000"])
    result = run(cfg)
    assert not ray.is_initialized()  # the local cluster is gone

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ["critic/score/mean", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "critic/vf_loss",
                "timing_s/gen", "timing_s/update_actor", "timing_s/update_critic", "timing_s/step",
                "timing_s/weight_sync", "response_length/mean", "perf/throughput", "actor/reward_kl_penalty"]:
        assert all(key in r for r in rows), key
    for r in rows:
        assert 0.0 <= r["critic/score/mean"] <= 1.0
        phases = sum(r[f"timing_s/{p}"] for p in ("gen", "reward", "old_log_prob", "ref", "values", "adv",
                                                   "update_critic", "update_actor"))
        assert phases <= r["timing_s/step"]
    assert (out / "config.yaml").exists() and json.loads((out / "summary.json").read_text())["window"] >= 1

    initial = load_file(out / "tiny_model" / "model.safetensors")
    trained = load_file(out / "actor_hf" / "model.safetensors")
    assert initial.keys() == trained.keys()
    assert any(not torch.equal(initial[k], trained[k]) for k in initial), "parameters did not change"
    model = AutoModelForCausalLM.from_pretrained(result["actor_hf"])
    assert model(torch.tensor([[4, 5, 6, 13]])).logits.shape[-1] == model.config.vocab_size
