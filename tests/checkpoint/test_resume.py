"""Exact resume: stop after step k, resume, and end bitwise-identical to an uninterrupted run."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.dcp_io import read_full
from hybridrl.cli import main as cli_main
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.progress_bar=false",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "critic.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "critic.ppo_micro_batch_size_per_gpu=8",
    "trainer.save_freq=2",
    "trainer.ray.object_store_memory=100000000",
    "trainer.ray.include_dashboard=false",
    "trainer.logger=[jsonl]",
    "actor_rollout_ref.actor.shuffle=true",
]


def training_metrics(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    # Timings differ run to run; the shorter run also validates at its last step (val-*).
    skip = ("timing_s/", "perf/", "ray/", "val-")
    return [{k: v for k, v in r.items() if not k.startswith(skip)} for r in rows]


def test_stop_resume_matches_uninterrupted_run(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    run(load_config(SMALL + [f"trainer.output_dir={full}", "trainer.total_steps=4"]))
    run(load_config(SMALL + [f"trainer.output_dir={split}", "trainer.total_steps=2"]))
    assert (split / "checkpoints" / "global_step_2").exists()
    result = run(load_config(SMALL + [f"trainer.output_dir={split}", "trainer.total_steps=4"]))
    assert len(result["history"]) == 4  # steps 1-2 read back from metrics.jsonl, 3-4 trained

    assert training_metrics(full / "metrics.jsonl") == training_metrics(split / "metrics.jsonl")
    a, b = load_file(full / "actor_hf" / "model.safetensors"), load_file(split / "actor_hf" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for role in ("actor_rollout", "critic"):  # critic weights and both optimizers, every tensor in full
        sa = read_full(full / "checkpoints" / "global_step_4" / role)
        sb = read_full(split / "checkpoints" / "global_step_4" / role)
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa), role

    # Export the final checkpoint: same logits as the actor saved at the end of the run.
    out = tmp_path / "exported"
    assert cli_main(["export", str(full / "checkpoints" / "global_step_4"), str(out)]) == 0
    ids = torch.tensor([[4, 5, 6, 13, 7]])
    exported = AutoModelForCausalLM.from_pretrained(out)(ids).logits
    final = AutoModelForCausalLM.from_pretrained(full / "actor_hf")(ids).logits
    torch.testing.assert_close(exported, final, rtol=0, atol=0)
    assert cli_main(["export", str(tmp_path / "nope"), str(out)]) == 2
