"""One epoch and one mini-batch: the update without the separate old-log-prob pass (its own forward's
log-probs, detached) equals the update with it, on one rank and on two FSDP ranks."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.testing.launch import run_ranks
from hybridrl.trainer.old_log_probs import old_log_prob_pass_needed
from tests.engine.test_fsdp_parity import make_batch, overrides
from tests.tiny_models import tiny

ON_POLICY = ("actor_rollout_ref.actor.ppo_epochs=1",)  # overrides() already give one mini-batch per step
FORWARD = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]


def update_on_rank(rank: int, world_size: int, model_path: str, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    cfg = load_config(overrides(world_size, "FULL_SHARD", ON_POLICY))
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    for path in ("full", "shortcut"):
        torch.manual_seed(0)
        actor = ActorRolloutRole.from_config(cfg, ctx)
        shard = make_batch(len(actor.tokenizer)).split(world_size)[rank]
        update_in = shard.select(tensor_keys=[*FORWARD, "advantages"], non_tensor_keys=[], meta_keys=["seed"])
        if path == "full":
            update_in.union(actor.compute_log_prob(shard.select(tensor_keys=FORWARD, non_tensor_keys=[], meta_keys=[])))
        metrics = actor.update_actor(update_in)
        state = actor.engine.full_state_dict()
        if rank == 0:
            save_file({k: v.contiguous() for k, v in state.items()}, f"{out_dir}/{path}.safetensors")
            torch.save(metrics, f"{out_dir}/{path}_metrics.pt")


@pytest.mark.parametrize("world_size", [1, 2])
def test_the_shortcut_gives_the_same_update(tmp_path, world_size):
    run_ranks(update_on_rank, world_size, tiny(tmp_path / "m"), str(tmp_path))
    full, shortcut = load_file(tmp_path / "full.safetensors"), load_file(tmp_path / "shortcut.safetensors")
    initial = load_file(tmp_path / "m" / "model.safetensors")
    assert full.keys() == shortcut.keys()
    assert any(not torch.equal(full[k], initial[k]) for k in initial)  # the update moved the weights
    for k in full:
        torch.testing.assert_close(shortcut[k], full[k], rtol=0, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
    metrics = torch.load(tmp_path / "shortcut_metrics.pt")
    assert metrics["actor/ppo_kl"] == 0.0 and metrics["actor/pg_clipfrac"] == 0.0  # the ratio is exactly 1


def test_the_pass_is_kept_where_something_needs_it():
    def needed(*extra):
        return old_log_prob_pass_needed(load_config(["actor_rollout_ref.model.path=null", *extra]))

    base = ["actor_rollout_ref.actor.ppo_epochs=1", "actor_rollout_ref.actor.ppo_mini_batch_size=32"]
    assert not needed(*base, "algorithm.use_kl_in_reward=false")
    assert needed(*base, "algorithm.use_kl_in_reward=true")  # the KL penalty reads them before the update
    assert needed(*base, "algorithm.use_kl_in_reward=false", "algorithm.rollout_correction.rollout_is=token")
    assert needed("actor_rollout_ref.actor.ppo_epochs=2", "algorithm.use_kl_in_reward=false")
    assert needed(  # two mini-batches: the second sees weights the first one changed
        "actor_rollout_ref.actor.ppo_epochs=1", "actor_rollout_ref.actor.ppo_mini_batch_size=16"
    )
