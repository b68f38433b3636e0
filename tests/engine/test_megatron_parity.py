"""Megatron-style tensor/sequence/pipeline parallelism on gloo ranks must train like one process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.checkpoint.shards import assemble_full
from hybridrl.config.loader import load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import BF16_MEAN_TOL, BF16_TOL, _close

B, P, R = 16, 5, 4  # sequences, prompt tokens (left-padded), response tokens (right-padded)


def make_batch(vocab: int) -> Batch:
    """Prompts of different lengths (left padding) and responses that stop early (right padding), so the
    attention masks of every stage and sequence shard are exercised."""
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, vocab, (B, P + R), generator=g)
    attention_mask = torch.ones(B, P + R, dtype=torch.long)
    response_mask = torch.ones(B, R, dtype=torch.long)
    for row in range(B):
        attention_mask[row, : row % 3] = 0
        stop = R - row % 2
        attention_mask[row, P + stop :] = 0
        response_mask[row, stop:] = 0
    input_ids = input_ids * attention_mask  # pad id 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return Batch.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, P:].clone(),
            "response_mask": response_mask,
            "old_log_probs": -torch.rand(B, R, generator=g) - 2.5,
            "advantages": torch.randn(B, R, generator=g),
            "values": torch.randn(B, R, generator=g) * 0.1,
            "returns": torch.randn(B, R, generator=g),
        },
        meta={"seed": 3},
    )


def overrides(world_size: int, layout: tuple[str, ...]) -> list[str]:
    # 4 prompts x 4 samples = 16 sequences, one mini-batch; 2 epochs an update, as test_fsdp_parity's (the steps
    # BF16_TOL is set on). Micro-batches of 4 rows: still 2-4 accumulated a step on every layout (4 through each
    # pipeline), and ~30% less CPU than 2 rows (DTensor's per-operator dispatch is per micro-batch).
    return [
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_epochs=2",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "critic.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "critic.forward_micro_batch_size_per_gpu=4",
        f"resource_pool.pools.global_pool.GPU={world_size}",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.grad_clip=0.5",
        # Adam divides by sqrt(v) + eps: with the default 1e-8 an element whose true gradient is ~0 (float
        # noise, which differs with the reduction order of every parallel layout) moves by ~lr anyway.
        # A larger eps keeps such elements still, so the comparison tests the parallel gradients.
        "actor_rollout_ref.actor.optim.eps=1e-4",
        "critic.optim.eps=1e-4",
        *layout,
    ]


def megatron(tp: int = 1, pp: int = 1, sp: bool = False, schedule: str = "1F1B") -> tuple[str, ...]:
    out = []
    for role in ("actor_rollout_ref.actor", "critic"):
        out += [
            f"{role}.strategy=megatron",
            f"{role}.parallel_config.megatron.tp_size={tp}",
            f"{role}.parallel_config.megatron.pp_size={pp}",
            f"{role}.parallel_config.megatron.sequence_parallel={str(sp).lower()}",
            f"{role}.parallel_config.megatron.pp_schedule={schedule}",
        ]
    return tuple(out)


def train_on_rank(rank: int, world_size: int, model_path: str, out_dir: str, layout: tuple[str, ...]) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.checkpoint.shards import load_engine_shard, save_engine_shard
    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, layout))
    mesh = init_device_mesh("cpu", (world_size,))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
    actor, critic = ActorRolloutRole.from_config(cfg, ctx), CriticRole.from_config(cfg, ctx)
    dp_rank, dp_size, collects = actor.dp_layout("update_actor")
    actor_cfg = cfg.actor_rollout_ref.actor
    if actor_cfg.strategy == "megatron" and actor_cfg.parallel_config.megatron.tp_size > 1:
        model = actor.engine.model  # vocabulary-parallel embedding and head (17 rows: uneven over 2 ranks)
        for module in (model.model.embed_tokens, model.lm_head):
            assert module is None or module.weight.placements[0].is_shard(0)
    shard = make_batch(len(actor.tokenizer)).split(dp_size)[dp_rank]
    log_probs = actor.compute_log_prob(shard)
    values = critic.compute_values(shard)
    actor_rows = [actor.update_actor(shard) for _ in range(3)]
    critic_rows = [critic.update_critic(shard) for _ in range(3)]
    actor_state, critic_state = actor.engine.full_state_dict(), critic.engine.full_state_dict()
    actor.weights.hand_over()  # the hand-over to generation: the rollout copy gets exactly the trained weights
    digest = actor.state_digest()
    if cfg.actor_rollout_ref.actor.precision != "bf16":  # (a bf16 run generates with a bf16 copy)
        assert digest["train"] == digest["rollout"], "generation engine did not get the trained weights"
    # Checkpoint shards of every layout reassemble into the full weights (export), and load back in place
    # (resume): one more update, then loading the checkpoint restores the saved weights exactly.
    for name, role in (("actor", actor), ("critic", critic)):
        save_engine_shard(role.engine.model, role.engine.optimizer, Path(out_dir) / f"ckpt_{name}", rank, world_size)
    critic.update_critic(shard)
    load_engine_shard(critic.engine.model, critic.engine.optimizer, Path(out_dir) / "ckpt_critic", rank, world_size)
    restored = critic.engine.full_state_dict()
    assert all(torch.equal(restored[k], critic_state[k]) for k in critic_state), "resume did not restore weights"
    save_file({k: v.contiguous() for k, v in actor_state.items()}, f"{out_dir}/actor_rank{rank}.safetensors")
    save_file({k: v.contiguous() for k, v in critic_state.items()}, f"{out_dir}/critic_rank{rank}.safetensors")
    if collects:
        torch.save(
            {
                "dp_rank": dp_rank,
                "old_log_probs": log_probs.tensors["old_log_probs"],
                "values": values.tensors["values"],
                "pg": torch.tensor([r["actor/pg_loss"] for r in actor_rows]),
                "vf": torch.tensor([r["critic/vf_loss"] for r in critic_rows]),
                "grad_norm": torch.tensor([r["actor/grad_norm"] for r in actor_rows]),
                "skipped": actor.engine.skipped_steps,
                "scale": actor.engine.loss_scaler.scale if actor.engine.loss_scaler else 0.0,
            },
            f"{out_dir}/result_dp{dp_rank}.pt",
        )


@pytest.fixture(scope="module")
def tiny_and_reference(tmp_path_factory):
    """The tiny model (4 heads, 2 KV heads, 4 layers) and its single-process training run."""
    root = tmp_path_factory.mktemp("megatron")
    model_path = ensure_tiny_model(
        root / "m",
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        seed=0,
    )
    single = root / "one"
    single.mkdir()
    run_ranks(train_on_rank, 1, model_path, str(single), ())
    return model_path, single


# Tensor parallelism alone (tp2) and with sequence parallel (tp2-sp) are inside dp2-tp2 and tp2-pp2-sp, which
# must match the single process exactly too: each of those was ~20 CPU-seconds of a 2-core CI run (DTensor's
# per-operator dispatch) for no path the combined layouts leave out. tp2-sp alone still runs in bf16 below.
@pytest.mark.parametrize(
    "world,layout",
    [
        pytest.param(2, megatron(pp=2), id="pp2-1f1b"),
        pytest.param(2, megatron(pp=2, schedule="GPipe"), id="pp2-gpipe"),
        pytest.param(4, megatron(tp=2, pp=2, sp=True), id="tp2-pp2-sp"),
        pytest.param(4, megatron(tp=2), id="dp2-tp2"),
    ],
)
def test_megatron_matches_single_process(tmp_path, tiny_and_reference, world, layout):
    model_path, single = tiny_and_reference
    run_ranks(train_on_rank, world, model_path, str(tmp_path), layout)
    for role in ("actor", "critic"):
        ref = load_file(single / f"{role}_rank0.safetensors")
        ranks = [load_file(tmp_path / f"{role}_rank{r}.safetensors") for r in range(world)]
        for other in ranks[1:]:  # the gathered full weights are the same on every rank
            _close(ranks[0], other, rtol=0, atol=0)
        _close(ref, ranks[0])
        _close(assemble_full(tmp_path / f"ckpt_{role}"), ranks[0], rtol=0, atol=0)
    one = torch.load(single / "result_dp0.pt")
    dp = len(list(tmp_path.glob("result_dp*.pt")))
    many = [torch.load(tmp_path / f"result_dp{i}.pt") for i in range(dp)]
    torch.testing.assert_close(
        torch.cat([m["old_log_probs"] for m in many]), one["old_log_probs"], rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(torch.cat([m["values"] for m in many]), one["values"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sum(m["pg"] for m in many) / dp, one["pg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sum(m["vf"] for m in many) / dp, one["vf"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(many[0]["grad_norm"], one["grad_norm"], rtol=1e-5, atol=1e-6)


def test_megatron_bf16_stays_close_to_fp32(tmp_path, tiny_and_reference):
    """bf16 autocast under tp=2 + sequence parallel, against the fp32 single process: within the bf16
    bound of the FSDP parity tests (2 x lr x steps per weight, small mean; docs/TUNING.md)."""
    model_path, single = tiny_and_reference
    run_ranks(
        train_on_rank,
        2,
        model_path,
        str(tmp_path),
        megatron(tp=2, sp=True) + ("actor_rollout_ref.actor.precision=bf16",),
    )
    ref, got = load_file(single / "actor_rank0.safetensors"), load_file(tmp_path / "actor_rank0.safetensors")
    _close(ref, got, rtol=0, atol=BF16_TOL)
    diffs = torch.cat([(ref[k] - got[k]).abs().flatten() for k in ref])
    assert diffs.mean() < BF16_MEAN_TOL, float(diffs.mean())


def test_megatron_fp16_loss_scaling_skips_overflowing_steps(tmp_path, tiny_and_reference):
    model_path, _ = tiny_and_reference
    run_ranks(
        train_on_rank,
        2,
        model_path,
        str(tmp_path),
        megatron(pp=2) + ("actor_rollout_ref.actor.precision=fp16", "actor_rollout_ref.actor.gradient_scale=1e30"),
    )
    result = torch.load(tmp_path / "result_dp0.pt")
    # A 1e30 scale overflows fp16 gradients on some stage: every stage skips that step together.
    assert result["skipped"] >= 1 and result["scale"] < 1e30
    assert torch.isfinite(result["pg"]).all()
    final = load_file(tmp_path / "actor_rank0.safetensors")
    assert all(torch.isfinite(v).all() for v in final.values())
