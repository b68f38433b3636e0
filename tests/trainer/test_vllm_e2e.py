"""The default run with vLLM generating: the built-in task learns, and the rollout-vs-trainer gap is
reported every step. (The default run's whole curve is tests/trainer/test_default_run.py's: generation is
the only difference here, and 50 steps show that it learns at a third of the CPU time.)"""

from __future__ import annotations

import json

import pytest

from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytest.importorskip("vllm", reason="vLLM is not installed in this environment: `make test` runs these in .venv-vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow]


def test_default_run_learns_with_vllm(tmp_path):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            "trainer.progress_bar=false",
            "trainer.ray.object_store_memory=100000000",
            "actor_rollout_ref.rollout.name=vllm",
            # vLLM's CPU attention takes heads of 32 dimensions and up; the tiny model's are 16 by default
            "actor_rollout_ref.model.tiny.num_attention_heads=2",
            "trainer.total_steps=50",
            "actor_rollout_ref.actor.ppo_epochs=2",  # the shape the figure below was measured on
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 50
    # fp32 on CPU: vLLM samples from the trainer's distribution up to kernel rounding
    assert max(r["training/rollout_probs_diff_max"] for r in rows) < 1e-3
    # vLLM's tiny model has 2 heads of 32 dimensions, not the default run's 4 of 16, and vLLM's kernels round
    # differently on each CPU, so where the curve is at a given step depends on the machine: its 10-step mean
    # was 0.32 at step 50 (from 0.09) on the AVX-512 CI machine. Held to a rise of 0.1, as the 30-step
    # Megatron run is.
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["gain"] >= 0.1, summary
    assert read_weights(tmp_path / "actor_hf")


def test_vllm_on_a_rollout_pool_of_its_own_gets_every_update(tmp_path):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            "trainer.progress_bar=false",
            "trainer.total_steps=10",
            "trainer.save_freq=-1",
            "trainer.ray.object_store_memory=100000000",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.model.tiny.num_attention_heads=2",
            "resource_pool.pools.global_pool.GPU=1",
            "+resource_pool.pools.rollout_pool.GPU=1",
            "+resource_pool.mapping.rollout=rollout_pool",
        ]
    )
    run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    # vLLM on the rollout workers samples from the weights the actor just trained (handed over through the
    # weight channel every step): its log-probs match the actor's own pass as in the colocated run.
    assert max(r["training/rollout_probs_diff_max"] for r in rows) < 1e-3
    assert all(r["timing_s/weight_handover"] > 0 for r in rows)
