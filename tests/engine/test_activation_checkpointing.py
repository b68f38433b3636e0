"""Activation checkpointing recomputes each decoder layer in backward and trains exactly as without it,
under FSDP2 and the megatron layouts."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.testing.launch import run_ranks
from tests.engine.test_megatron_parity import make_batch, megatron, overrides
from tests.tiny_models import tiny

LAYOUTS = {"fsdp": (), "megatron_tp2": megatron(tp=2), "megatron_pp2": megatron(pp=2)}


def count_attention_calls(model: torch.nn.Module) -> list[int]:
    """A one-element list counting the forward calls of the model's attention blocks."""
    calls = [0]

    def count(*_: object) -> None:
        calls[0] += 1

    for module in model.modules():
        if type(module).__name__.endswith("Attention"):
            module.register_forward_hook(count)
    return calls


def train_on_rank(rank: int, world_size: int, model_path: str, out_dir: str, layout: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole

    for checkpointing in (False, True):
        torch.manual_seed(0)
        flags = str(checkpointing).lower()
        cfg = load_config(
            overrides(world_size, LAYOUTS[layout])
            + [
                f"actor_rollout_ref.model.enable_gradient_checkpointing={flags}",
                f"critic.model.enable_gradient_checkpointing={flags}",
            ]
        )
        mesh = init_device_mesh("cpu", (world_size,))
        ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
        actor, critic = ActorRolloutRole.from_config(cfg, ctx), CriticRole.from_config(cfg, ctx)
        attention_calls = count_attention_calls(actor.engine.model)
        dp_rank, dp_size, _ = actor.dp_layout("update_actor")
        shard = make_batch(len(actor.tokenizer)).split(dp_size)[dp_rank]
        for _ in range(2):
            actor.update_actor(shard)
            critic.update_critic(shard)
        state = {f"actor/{k}": v.clone() for k, v in actor.engine.full_state_dict().items()}
        state.update({f"critic/{k}": v.clone() for k, v in critic.engine.full_state_dict().items()})
        save_file(state, f"{out_dir}/{layout}_{flags}_rank{rank}.safetensors")
        torch.save(attention_calls[0], f"{out_dir}/{layout}_{flags}_calls{rank}.pt")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_checkpointed_training_equals_plain_training(tmp_path, layout):
    model_path = tiny(str(tmp_path / "tiny"))
    run_ranks(train_on_rank, 2, model_path, str(tmp_path), layout)
    for rank in range(2):
        plain = load_file(str(tmp_path / f"{layout}_false_rank{rank}.safetensors"))
        recomputed = load_file(str(tmp_path / f"{layout}_true_rank{rank}.safetensors"))
        for key, tensor in plain.items():
            torch.testing.assert_close(recomputed[key], tensor, rtol=0, atol=1e-6, msg=f"{layout}: {key}")
        # Every attention block ran again in backward: twice the forward calls, except (on a pipeline stage
        # that runs it without gradients) the one pass a new schedule makes to infer shapes.
        calls_plain = torch.load(tmp_path / f"{layout}_false_calls{rank}.pt")
        calls_recomputed = torch.load(tmp_path / f"{layout}_true_calls{rank}.pt")
        extra = 1 if layout == "megatron_pp2" else 0
        assert calls_plain > 0 and 2 * calls_plain - extra <= calls_recomputed <= 2 * calls_plain, (
            calls_plain,
            calls_recomputed,
        )
