"""LoRA end to end on 2 workers: the reference is the actor's base (no reference model), an interrupted run
resumes bitwise, and the checkpoint exports merged (transformers) or as a PEFT adapter."""

from __future__ import annotations

import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.dcp_io import read_full
from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.checkpoint.manager import role_dir
from hybridrl.cli import main as cli_main
from hybridrl.config.loader import load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

LORA = [
    "trainer.progress_bar=false",
    "trainer.logger=[jsonl]",
    "trainer.ray.object_store_memory=100000000",
    "trainer.ray.include_dashboard=false",
    "trainer.save_freq=2",
    "algorithm.adv_estimator=grpo",
    "actor_rollout_ref.rollout.n=4",
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",  # one optimizer step a training step
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.1",
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "actor_rollout_ref.model.lora_rank=4",
    "actor_rollout_ref.model.lora_alpha=8",
]


def _metrics(path):
    skip = ("timing_s/", "perf/", "ray/", "val-", "train/restarts")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(skip)} for r in rows]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    return ensure_tiny_model(
        tmp_path_factory.mktemp("lora_base") / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        seed=0,
    )


def test_lora_runs_without_a_reference_model_resumes_exactly_and_exports(base_model, tmp_path, shared_ray):
    cfg = [*LORA, f"actor_rollout_ref.model.path={base_model}", f"trainer.ray.address={shared_ray}"]
    full, split = tmp_path / "full", tmp_path / "split"
    run(load_config([*cfg, f"trainer.output_dir={full}", "trainer.total_steps=4"]))
    run(load_config([*cfg, f"trainer.output_dir={split}", "trainer.total_steps=2"]))
    run(load_config([*cfg, f"trainer.output_dir={split}", "trainer.total_steps=4"]))

    groups = json.loads((full / "placement.json").read_text())
    assert [g.split("+") for g in groups] == [["actor_rollout"]]  # no reference model anywhere
    rows = _metrics(full / "metrics.jsonl")
    kl = [r["actor/kl_loss"] for r in rows if "actor/kl_loss" in r]
    assert len(kl) == 4 and kl[0] == pytest.approx(0.0, abs=1e-7) and max(kl) > 0  # the base, then apart
    assert rows == _metrics(split / "metrics.jsonl")
    a = read_full(role_dir(full / "checkpoints" / "global_step_4", "actor_rollout"))
    b = read_full(role_dir(split / "checkpoints" / "global_step_4", "actor_rollout"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the optimizer holds state for the adapters only
    assert {k for k in a if k.startswith("optim.")} and all(".lora_" in k for k in a if k.startswith("optim."))

    ids = torch.tensor([[4, 5, 6, 13, 7]])
    merged = tmp_path / "merged"
    assert cli_main(["export", str(full / "checkpoints" / "global_step_4"), str(merged)]) == 0
    final = AutoModelForCausalLM.from_pretrained(full / "actor_hf")
    exported = AutoModelForCausalLM.from_pretrained(merged)
    torch.testing.assert_close(exported(ids).logits, final(ids).logits, rtol=0, atol=0)
    assert exported.generate(ids, max_new_tokens=3, do_sample=False).shape == (1, 8)
    assert read_weights(merged).keys() == read_weights(full / "actor_hf").keys()

    adapter = tmp_path / "adapter"
    assert cli_main(["export", str(full / "checkpoints" / "global_step_4"), str(adapter), "--adapter"]) == 0
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_model), str(adapter))
    with torch.no_grad():
        torch.testing.assert_close(peft_model(ids).logits, final(ids).logits, atol=1e-5, rtol=0)
        base_logits = AutoModelForCausalLM.from_pretrained(base_model)(ids).logits
        assert (final(ids).logits - base_logits).abs().max() > 1e-4  # the adapters trained
