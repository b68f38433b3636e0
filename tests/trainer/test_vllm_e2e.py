"""The default run with vLLM generating: the built-in task learns, and the rollout-vs-trainer gap is
reported every step. (The default run's whole curve is tests/trainer/test_default_run.py's: generation is
the only difference here, and 40 steps show that it learns at a quarter of the CPU time.)"""

from __future__ import annotations

import json

import pytest

from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytest.importorskip("vllm", reason="vLLM is not installed in this environment: `make test` runs these in .venv-vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow, pytest.mark.long]

# vLLM on a rollout worker of its own beside one training worker (vLLM's CPU attention takes heads of 32
# dimensions and up: the tiny model gets 2 of them).
VLLM_ROLLOUT_POOL = [
    "trainer.ray.object_store_memory=100000000",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.model.tiny.num_attention_heads=2",
    "resource_pool.pools.global_pool.GPU=1",
    "+resource_pool.pools.rollout_pool.GPU=1",
    "+resource_pool.mapping.rollout=rollout_pool",
]


def test_default_run_learns_with_vllm(tmp_path, shared_ray):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            f"trainer.ray.address={shared_ray}",
            "trainer.progress_bar=false",
            "trainer.ray.object_store_memory=100000000",
            "actor_rollout_ref.rollout.name=vllm",
            # vLLM's CPU attention takes heads of 32 dimensions and up; the tiny model's are 16 by default
            "actor_rollout_ref.model.tiny.num_attention_heads=2",
            "trainer.total_steps=40",
            "actor_rollout_ref.actor.ppo_epochs=2",  # the shape the figure below was measured on
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    # fp32 on CPU: vLLM samples from the trainer's distribution up to kernel rounding
    assert max(r["training/rollout_probs_diff_max"] for r in rows) < 1e-3
    # vLLM's tiny model has 2 heads of 32 dimensions, not the default run's 4 of 16, and vLLM's kernels round
    # differently on each CPU, so where the curve is at a given step depends on the machine: the summary's gain
    # (5-step means) was 0.225 at step 40 and 0.237 at step 50 here (2026-12-07; 10-step mean 0.28 over steps
    # 31-40, from 0.09), and the 10-step mean was 0.32 at step 50 on the AVX-512 CI machine. Held to a rise of
    # 0.1, as the 30-step Megatron run is.
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gain"] >= 0.1, summary
    assert read_weights(tmp_path / "actor_hf")


def test_vllm_on_a_rollout_pool_of_its_own_gets_every_update(tmp_path, shared_ray):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            f"trainer.ray.address={shared_ray}",
            "trainer.progress_bar=false",
            "trainer.total_steps=10",
            "trainer.save_freq=-1",
            *VLLM_ROLLOUT_POOL,
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    # vLLM on the rollout workers samples from the weights the actor just trained (handed over through the
    # weight channel every step): its log-probs match the actor's own pass as in the colocated run.
    assert max(r["training/rollout_probs_diff_max"] for r in rows) < 1e-3
    assert all(r["timing_s/weight_handover"] > 0 for r in rows)


def test_vllm_fully_asynchronous_with_partial_rollouts_resumes_responses_from_their_prefix(tmp_path, shared_ray):
    """vLLM's calls cannot be interrupted: with partial rollouts each returns after partial_rollout_tokens and
    the unfinished responses go on from prompt + tokens so far in the next call."""
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            f"trainer.ray.address={shared_ray}",
            "trainer.progress_bar=false",
            "trainer.total_steps=3",
            "trainer.save_freq=-1",
            "trainer.save_hf=false",
            *VLLM_ROLLOUT_POOL,
            "data.max_response_length=16",
            "async_training.enable=true",
            "async_training.staleness_threshold=1",
            "async_training.trigger_parameter_sync_step=1",
            "async_training.require_batches=1",
            "async_training.partial_rollout_tokens=4",
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    assert max(r["response_length/max"] for r in rows) > 4  # responses longer than one call's segment
    assert all(r["fully_async/max_version_gap"] <= 1 for r in rows)


def test_vllm_with_a_lora_actor_samples_from_the_merged_adapters(tmp_path, shared_ray):
    """LoRA with vLLM: the hand-over merges W + alpha/r B A in fp32 (bench/vllm_lora.py: exact, and 3x faster
    to generate with than vLLM's LoRA layers on CPU), so vLLM samples from the adapted policy: its log-probs
    match the actor's own pass on every step while the adapters move."""
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            f"trainer.ray.address={shared_ray}",
            "trainer.progress_bar=false",
            "trainer.total_steps=6",
            "trainer.save_freq=-1",
            "trainer.ray.object_store_memory=100000000",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.model.tiny.num_attention_heads=2",
            "actor_rollout_ref.model.lora_rank=8",
            "actor_rollout_ref.model.lora_alpha=16",
            "actor_rollout_ref.actor.optim.lr=3e-3",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "algorithm.use_kl_in_reward=false",
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    assert max(r["training/rollout_probs_diff_max"] for r in rows) < 1e-3
    assert rows[-1]["actor/kl_loss"] > 0  # the adapters moved the policy away from the base (the reference)
    assert read_weights(tmp_path / "actor_hf")  # the merged export
