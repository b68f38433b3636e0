"""``hybridrl plan``: the memory model's terms move as the config says, a 7B plan answers in seconds without
Ray, and a run that does not fit gets a change that makes it fit."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from hybridrl.cli import main
from hybridrl.config.loader import load_config
from hybridrl.planning.fixes import fixes, planner
from hybridrl.planning.memory import GB, Device, plan_memory
from hybridrl.planning.shape import ModelShape

QWEN_7B = {
    "model_type": "qwen2",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "tie_word_embeddings": False,
}
# verl's quickstart-style GRPO on one node of 8 GPUs (examples/grpo_trainer/run_qwen2-7b.sh's sizes)
QUICKSTART = [
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=1024",
    "data.max_prompt_length=512",
    "data.max_response_length=1024",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.precision=bf16",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.model.use_fused_kernels=true",
]
SHAPE = ModelShape(vocab=1000, hidden=256, layers=4, heads=4, kv_heads=2, head_dim=64, ffn=512)
H100 = Device("cuda", 80 * GB)


@pytest.fixture
def qwen_7b(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN_7B))  # no weights: the planner reads sizes only
    return tmp_path


def phase(plan, name, pool=0):
    return next(p for p in plan.groups[pool].phases if p.name == name)


# SHAPE stands for a real model, which FSDP shards (the schema's default); with model.path null the tiny run's
# preset would replicate it instead (NO_SHARD).
SHARDED = ["actor_rollout_ref.actor.fsdp.sharding_strategy=FULL_SHARD", "critic.fsdp.sharding_strategy=FULL_SHARD"]


def plan(*overrides, device=H100):
    return plan_memory(load_config(["algorithm.adv_estimator=grpo", *SHARDED, *overrides]), SHAPE, device)


def test_full_sharding_divides_the_trained_state_by_the_workers():
    one, four = plan("resource_pool.pools.global_pool.GPU=1"), plan("resource_pool.pools.global_pool.GPU=4")
    for part in ("actor weights", "actor optimizer", "gradients"):
        assert phase(four, "update actor").parts[part] == pytest.approx(phase(one, "update actor").parts[part] / 4)
    replicated = plan(
        "resource_pool.pools.global_pool.GPU=4", "actor_rollout_ref.actor.fsdp.sharding_strategy=NO_SHARD"
    )
    assert (
        phase(replicated, "update actor").parts["actor optimizer"]
        == phase(one, "update actor").parts["actor optimizer"]
    )


def test_offload_keeps_state_off_the_device_outside_its_phases():
    kept = plan(
        "actor_rollout_ref.actor.fsdp.param_offload=true", "actor_rollout_ref.actor.fsdp.optimizer_offload=true"
    )
    assert (
        "actor weights" not in phase(kept, "generate").parts and "actor optimizer" not in phase(kept, "generate").parts
    )
    assert {"actor weights", "actor optimizer"} <= phase(kept, "update actor").parts.keys()
    assert "actor optimizer" not in phase(kept, "log-probs").parts


def test_the_generation_engine_is_freed_outside_generation_on_a_gpu_only():
    assert "generation weights" in phase(plan(), "generate").parts
    assert "generation weights" not in phase(plan(), "update actor").parts
    on_cpu = plan(device=Device("cpu", 16 * GB))
    assert "generation weights" in phase(on_cpu, "update actor").parts  # the hf engine stays on a CPU


def test_lora_trains_and_keeps_optimizer_state_for_the_adapters_only():
    full = phase(plan("actor_rollout_ref.actor.use_kl_loss=true"), "update actor")
    lora_plan = plan("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.model.lora_rank=8")
    lora = phase(lora_plan, "update actor")
    world = lora_plan.groups[0].world_size
    assert lora.parts["actor optimizer"] == pytest.approx(2 * 4 * SHAPE.lora_params(8) / world)
    assert lora.parts["actor optimizer"] < full.parts["actor optimizer"] / 5
    assert "ref weights" in full.parts and "ref weights" not in lora.parts  # the reference is the base


def test_checkpointing_and_fused_kernels_shrink_the_update():
    plain = phase(plan("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"), "update actor")
    lean = phase(
        plan(
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
            "actor_rollout_ref.model.enable_gradient_checkpointing=true",
            "actor_rollout_ref.model.use_fused_kernels=true",
        ),
        "update actor",
    )
    assert (
        lean.parts["activations"] < plain.parts["activations"] / 2 and lean.parts["logits"] == 0 < plain.parts["logits"]
    )


def test_a_separate_rollout_pool_generates_on_its_own_workers():
    split = plan(
        "resource_pool.pools={train: {GPU: 2}, gen: {GPU: 2}}",
        "resource_pool.mapping={actor_rollout: train, rollout: gen}",
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=1",
    )
    phases = {group.pool: [p.name for p in group.phases] for group in split.groups}
    assert "generate" not in phases["train"] and "update actor" in phases["train"]
    assert "generate" in phases["gen"] and "update actor" not in phases["gen"]
    # the hand-over's buckets: two on a sender, two per sender (both actor ranks send) on a generation worker
    bucket = 2**20
    assert phase(split, "hand-over", 0).parts["send buckets"] == 2 * bucket
    gen = next(i for i, group in enumerate(split.groups) if group.pool == "gen")
    assert phase(split, "hand-over", gen).parts["received buckets"] == 4 * bucket


def test_plan_of_a_7b_on_eight_80gb_gpus_answers_in_seconds_without_ray(qwen_7b):
    code = (
        "import sys, time; t = time.perf_counter(); from hybridrl.cli import main; "
        f"rc = main(['plan', '--gpu-memory-gb', '80', 'actor_rollout_ref.model.path={qwen_7b}', *{QUICKSTART!r}]); "
        "print('seconds', time.perf_counter() - t); print('ray imported', 'ray' in sys.modules); sys.exit(rc)"
    )
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fits: peak" in done.stdout and "update actor" in done.stdout and "generate" in done.stdout
    assert "ray imported False" in done.stdout
    assert time.perf_counter() - started < 15  # the command itself: "seconds" < 5 on an idle machine
    seconds = float(done.stdout.split("seconds ")[1].split()[0])
    assert seconds < 10, seconds


def test_a_plan_that_does_not_fit_offers_a_change_that_makes_it_fit(qwen_7b, capsys):
    tight = [f"actor_rollout_ref.model.path={qwen_7b}", *QUICKSTART, "actor_rollout_ref.model.use_fused_kernels=false"]
    tight += ["actor_rollout_ref.model.enable_gradient_checkpointing=false"]
    assert main(["plan", "--gpu-memory-gb", "80", *tight]) == 1
    out = capsys.readouterr().out
    assert "does not fit: peak" in out
    first = out.split("changes that make it fit, cheapest first:\n  1. ")[1].splitlines()[0].split()
    assert main(["plan", "--gpu-memory-gb", "80", *tight, *first]) == 0
    assert "fits: peak" in capsys.readouterr().out


def test_a_bad_model_directory_is_one_line(tmp_path, capsys):
    assert main(["plan", f"actor_rollout_ref.model.path={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no config.json" in err


LONG = [
    "data.max_response_length=32768",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.model.use_remove_padding=true",
    "resource_pool.pools.global_pool.GPU=4",
]


def test_ulysses_divides_a_ranks_activations_by_its_group_and_scores_without_logits():
    one = phase(plan(*LONG), "update actor")
    four = phase(plan(*LONG, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"), "update actor")
    assert four.parts["activations"] == pytest.approx(one.parts["activations"] / 4, rel=0.01)
    assert four.parts["logits"] == 0 < one.parts["logits"]
    # a token budget is per rank of the group (verl's meaning): the same tokens per rank as without Ulysses
    budget = ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=9000"]
    per_rank = phase(plan(*LONG, *budget, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"), "update actor")
    assert per_rank.parts["activations"] == pytest.approx(
        phase(plan(*LONG, *budget), "update actor").parts["activations"]
    )


def test_a_long_sequence_that_does_not_fit_is_offered_ulysses():
    cfg_overrides = [
        "algorithm.adv_estimator=grpo",
        *LONG,
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    ]
    base = plan_memory(load_config(cfg_overrides), SHAPE, H100)
    _, peak = base.peak
    device = Device("cuda", peak.bytes * 0.9)  # just too small: the long sequence's activations must shrink
    plan_of = planner(SHAPE, device)
    offered = fixes(cfg_overrides, None, plan_of, SHAPE)
    ulysses = [f for f in offered if any("ulysses_sequence_parallel_size=" in o for o in f.overrides)]
    assert ulysses and all(f.plan.fits for f in ulysses)
    assert "actor_rollout_ref.model.use_remove_padding=true" in ulysses[0].overrides
    assert not any("ulysses_sequence_parallel_size=8" in o for f in offered for o in f.overrides)  # 4 workers
