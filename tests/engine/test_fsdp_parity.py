"""FSDP2 on 2 gloo ranks must train exactly like one process (the parity test of the strategy)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks

B, P, R = 16, 4, 3  # sequences, prompt tokens, response tokens
# bf16 vs fp32 after 6 AdamW steps at lr 1e-3: Adam moves a weight by about lr per step whatever the
# gradient's size, so where a gradient is nearly 0 (e.g. the k_proj bias, which softmax ignores) bf16
# rounding can flip its sign and the two runs move that weight apart by up to 2 x lr per step.
# Bound: 2 x lr x steps for any weight, and a small mean difference (docs/TUNING.md).
BF16_TOL = 1.2e-2
BF16_MEAN_TOL = 3e-4


def make_batch(vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, vocab, (B, P + R), generator=g)
    attention_mask = torch.ones(B, P + R, dtype=torch.long)
    return Batch.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": torch.arange(P + R).expand(B, -1).clone(),
            "responses": input_ids[:, P:].clone(),
            "response_mask": torch.ones(B, R, dtype=torch.long),
            "old_log_probs": -torch.rand(B, R, generator=g) - 2.5,
            "advantages": torch.randn(B, R, generator=g),
            "values": torch.randn(B, R, generator=g) * 0.1,
            "returns": torch.randn(B, R, generator=g),
        },
        meta={"seed": 3},
    )


def overrides(world_size: int, sharding: str, extra: tuple[str, ...] = ()) -> list[str]:
    # 4 prompts x 4 samples = 16 sequences; one mini-batch of 16, micro-batches of 4 on every layout; 2 epochs
    # an update (so 3 updates are the 6 AdamW steps BF16_TOL is set on, whatever the default run's preset).
    return [
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_epochs=2",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "critic.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=4",
        f"resource_pool.pools.global_pool.GPU={world_size}",
        f"actor_rollout_ref.actor.fsdp.sharding_strategy={sharding}",
        f"critic.fsdp.sharding_strategy={sharding}",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        *extra,
    ]


def train_on_rank(
    rank: int, world_size: int, model_path: str, sharding: str, out_dir: str, extra: tuple[str, ...] = ()
) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, sharding, extra))
    mesh = init_device_mesh("cpu", (world_size,))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
    actor, critic = ActorRolloutRole.from_config(cfg, ctx), CriticRole.from_config(cfg, ctx)
    batch = make_batch(len(actor.tokenizer))
    shard = batch.split(world_size)[rank]
    losses = [actor.update_actor(shard)["actor/pg_loss"] for _ in range(3)]
    vf = [critic.update_critic(shard)["critic/vf_loss"] for _ in range(3)]
    actor_state, critic_state = actor.engine.full_state_dict(), critic.engine.full_state_dict()
    # Every rank must hold the same full weights; rank 0 writes them for the comparison.
    save_file({k: v.contiguous() for k, v in actor_state.items()}, f"{out_dir}/actor_rank{rank}.safetensors")
    save_file({k: v.contiguous() for k, v in critic_state.items()}, f"{out_dir}/critic_rank{rank}.safetensors")
    torch.save(
        {
            "pg": torch.tensor(losses),
            "vf": torch.tensor(vf),
            "skipped": actor.engine.skipped_steps,
            "scale": actor.engine.loss_scaler.scale if actor.engine.loss_scaler else 0.0,
        },
        f"{out_dir}/losses_rank{rank}.pt",
    )


def _close(a: dict, b: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"{k}: {m}")


@pytest.mark.parametrize(
    "sharding,world,extra",
    [
        ("FULL_SHARD", 2, ()),
        ("SHARD_GRAD_OP", 2, ()),
        ("NO_SHARD", 2, ()),
        # 4 ranks: 2 replicas x shard groups of 2. Replicas must stay equal and match one process.
        ("HYBRID_SHARD", 4, ("actor_rollout_ref.actor.fsdp.shard_group_size=2", "critic.fsdp.shard_group_size=2")),
        (
            "FULL_SHARD",
            2,
            ("actor_rollout_ref.actor.fsdp.limit_all_gathers=false", "critic.fsdp.limit_all_gathers=false"),
        ),
        # CPU offload is meaningful without an accelerator too (plain, unpinned memory): same result.
        ("FULL_SHARD", 2, ("actor_rollout_ref.actor.fsdp.cpu_offload=true", "critic.fsdp.cpu_offload=true")),
    ],
)
def test_fsdp_matches_single_process(tmp_path, sharding, world, extra):
    model_path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        seed=0,
    )
    single, multi = tmp_path / "one", tmp_path / "many"
    single.mkdir(), multi.mkdir()
    run_ranks(train_on_rank, 1, model_path, "FULL_SHARD", str(single))
    run_ranks(train_on_rank, world, model_path, sharding, str(multi), extra)
    for role in ("actor", "critic"):
        ref = load_file(single / f"{role}_rank0.safetensors")
        ranks = [load_file(multi / f"{role}_rank{r}.safetensors") for r in range(world)]
        for other in ranks[1:]:
            _close(ranks[0], other, rtol=0, atol=0)  # every rank (every replica) holds the same weights
        _close(ref, ranks[0])
        if role == "actor":
            initial = load_file(tmp_path / "m" / "model.safetensors")
            assert any(not torch.equal(initial[k], ref[k]) for k in initial), "training changed nothing"
    one = torch.load(single / "losses_rank0.pt")
    many = [torch.load(multi / f"losses_rank{r}.pt") for r in range(world)]
    # Each rank reports its shard's loss; their mean is the single-process loss over the whole batch.
    torch.testing.assert_close(sum(m["pg"] for m in many) / world, one["pg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sum(m["vf"] for m in many) / world, one["vf"], rtol=1e-5, atol=1e-6)


def test_bf16_mixed_precision_stays_close_to_fp32(tmp_path):
    """bf16 parameters in compute (fp32 masters and reduction): within BF16_TOL of the fp32 run."""
    model_path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        seed=0,
    )
    fp32, bf16 = tmp_path / "fp32", tmp_path / "bf16"
    fp32.mkdir(), bf16.mkdir()
    run_ranks(train_on_rank, 1, model_path, "FULL_SHARD", str(fp32))
    run_ranks(
        train_on_rank,
        2,
        model_path,
        "FULL_SHARD",
        str(bf16),
        ("actor_rollout_ref.actor.fsdp.mixed_precision=true", "actor_rollout_ref.actor.precision=bf16"),
    )
    ref, got = load_file(fp32 / "actor_rank0.safetensors"), load_file(bf16 / "actor_rank0.safetensors")
    _close(ref, got, rtol=0, atol=BF16_TOL)
    diffs = torch.cat([(ref[k] - got[k]).abs().flatten() for k in ref])
    assert diffs.mean() < BF16_MEAN_TOL, float(diffs.mean())


def test_fp16_loss_scaling_skips_overflowing_steps(tmp_path):
    model_path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        seed=0,
    )
    run_ranks(
        train_on_rank,
        2,
        model_path,
        "FULL_SHARD",
        str(tmp_path),
        ("actor_rollout_ref.actor.precision=fp16", "actor_rollout_ref.actor.gradient_scale=1e30"),
    )
    result = torch.load(tmp_path / "losses_rank0.pt")
    # A 1e30 scale overflows fp16 gradients: those steps are skipped and the scale halves each time.
    assert result["skipped"] >= 1 and result["scale"] < 1e30
    assert torch.isfinite(result["pg"]).all()
    initial = load_file(tmp_path / "m" / "model.safetensors")
    final = load_file(tmp_path / "actor_rank0.safetensors")
    assert all(torch.isfinite(v).all() for v in final.values()) and initial.keys() == final.keys()
