"""FSDP2 on 2 gloo ranks must train exactly like one process (the parity test of the strategy)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.protocol import Batch

from tests.parallel.dist_utils import run_ranks

B, P, R = 16, 4, 3  # sequences, prompt tokens, response tokens


def make_batch(vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, vocab, (B, P + R), generator=g)
    attention_mask = torch.ones(B, P + R, dtype=torch.long)
    return Batch.from_dict(tensors={
        "input_ids": input_ids, "attention_mask": attention_mask,
        "position_ids": torch.arange(P + R).expand(B, -1).clone(),
        "responses": input_ids[:, P:].clone(), "response_mask": torch.ones(B, R, dtype=torch.long),
        "old_log_probs": -torch.rand(B, R, generator=g) - 2.5,
        "advantages": torch.randn(B, R, generator=g),
        "values": torch.randn(B, R, generator=g) * 0.1,
        "returns": torch.randn(B, R, generator=g),
    }, meta={"seed": 3})


def overrides(world_size: int, sharding: str) -> list[str]:
    # 4 prompts x 4 samples = 16 sequences; one mini-batch of 16, micro-batches of 4 on every layout.
    return [
        "data.train_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "critic.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4", "critic.ppo_micro_batch_size_per_gpu=4",
        f"resource_pool.pools.global_pool.GPU={world_size}",
        f"actor_rollout_ref.actor.fsdp.sharding_strategy={sharding}", f"critic.fsdp.sharding_strategy={sharding}",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
    ]


def train_on_rank(rank: int, world_size: int, model_path: str, sharding: str, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole
    from hybridrl.workers.worker import WorkerContext

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, sharding))
    mesh = init_device_mesh("cpu", (world_size,))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
    actor, critic = ActorRolloutRole(cfg, ctx), CriticRole(cfg, ctx)
    batch = make_batch(len(actor.tokenizer))
    shard = batch.split(world_size)[rank]
    losses = [actor.update_actor(shard)["actor/pg_loss"] for _ in range(3)]
    vf = [critic.update_critic(shard)["critic/vf_loss"] for _ in range(3)]
    actor_state, critic_state = actor.engine.full_state_dict(), critic.engine.full_state_dict()
    # Every rank must hold the same full weights; rank 0 writes them for the comparison.
    save_file({k: v.contiguous() for k, v in actor_state.items()}, f"{out_dir}/actor_rank{rank}.safetensors")
    save_file({k: v.contiguous() for k, v in critic_state.items()}, f"{out_dir}/critic_rank{rank}.safetensors")
    torch.save({"pg": torch.tensor(losses), "vf": torch.tensor(vf)}, f"{out_dir}/losses_rank{rank}.pt")


def _close(a: dict, b: dict, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=rtol, atol=atol, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("sharding", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_two_rank_fsdp_matches_single_process(tmp_path, sharding):
    model_path = ensure_tiny_model(tmp_path / "m", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, intermediate_size=64, seed=0)
    single, double = tmp_path / "one", tmp_path / "two"
    single.mkdir(), double.mkdir()
    run_ranks(train_on_rank, 1, model_path, sharding, str(single))
    run_ranks(train_on_rank, 2, model_path, sharding, str(double))
    for role in ("actor", "critic"):
        ref = load_file(single / f"{role}_rank0.safetensors")
        r0 = load_file(double / f"{role}_rank0.safetensors")
        r1 = load_file(double / f"{role}_rank1.safetensors")
        _close(r0, r1, rtol=0, atol=0)  # replicas of the gathered weights are identical
        _close(ref, r0)
        initial = load_file(tmp_path / "m" / "model.safetensors")
        if role == "actor":
            assert any(not torch.equal(initial[k], ref[k]) for k in initial), "training changed nothing"
    one, two = torch.load(single / "losses_rank0.pt"), [torch.load(double / f"losses_rank{r}.pt") for r in (0, 1)]
    # Each rank reports its shard's loss; their mean is the single-process loss over the whole batch.
    torch.testing.assert_close((two[0]["pg"] + two[1]["pg"]) / 2, one["pg"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close((two[0]["vf"] + two[1]["vf"]) / 2, one["vf"], rtol=1e-5, atol=1e-6)
