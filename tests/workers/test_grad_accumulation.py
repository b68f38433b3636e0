"""Gradient accumulation weighs micro-batches by their share of the mini-batch: ragged micro-batches and
replicas train exactly like the whole mini-batch in one piece, for token-mean and seq-mean losses."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from tests.engine.test_megatron_parity import R, make_batch, megatron, overrides
from tests.tiny_models import tiny


def ragged_batch(vocab: int) -> Batch:
    """The parity batch with responses of 1-4 tokens, two rows per length: micro-batches of 2 rows hold
    2, 4, 6 or 8 valid tokens, and the two replicas' halves differ too."""
    batch = make_batch(vocab)
    prompt = batch.tensors["input_ids"].shape[1] - R
    attention, response = batch.tensors["attention_mask"].clone(), batch.tensors["response_mask"].clone()
    for row in range(len(batch)):
        stop = 1 + (row // 2) % R
        response[row, stop:] = 0
        attention[row, prompt + stop :] = 0
    batch.tensors["attention_mask"], batch.tensors["response_mask"] = attention, response
    return batch


def update_on_rank(
    rank: int, world_size: int, model_path: str, out: str, micro: int, mode: str, layout: tuple[str, ...]
) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    torch.manual_seed(0)
    cfg = load_config(
        overrides(world_size, layout)
        + [
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
            f"actor_rollout_ref.actor.loss_agg_mode={mode}",
            "actor_rollout_ref.actor.ppo_epochs=1",
            "actor_rollout_ref.actor.entropy_coeff=0",
            "actor_rollout_ref.actor.grad_clip=1000",
            # Adam's first step is ~lr * sign(g) with a small eps, blind to how gradients are weighed; with
            # eps = lr = 1 it is g / (|g| + 1): close to the gradient itself.
            "actor_rollout_ref.actor.optim.lr=1.0",
            "actor_rollout_ref.actor.optim.eps=1.0",
            "actor_rollout_ref.actor.optim.weight_decay=0",
        ]
    )
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    actor = ActorRolloutRole.from_config(cfg, ctx)
    initial = {k: v.clone() for k, v in actor.engine.full_state_dict().items()}
    dp_rank, dp_size, _ = actor.dp_layout("update_actor")
    shard = ragged_batch(len(actor.tokenizer)).split(dp_size)[dp_rank]
    actor.update_actor(shard)
    step = {k: v - initial[k] for k, v in actor.engine.full_state_dict().items()}  # the update itself
    if rank == 0:
        save_file(step, out)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_ragged_micro_batches_and_replicas_equal_one_piece(tmp_path, mode):
    model_path = tiny(str(tmp_path / "tiny"))
    runs = {
        "one piece": (1, 16, ()),
        "micro-batches of 2": (1, 2, ()),
        "2 fsdp replicas, micro-batches of 2": (2, 2, ()),
        "2 megatron replicas": (2, 4, megatron(tp=1)),
    }
    for name, (world, micro, layout) in runs.items():
        out = str(tmp_path / f"{name}.safetensors")
        run_ranks(update_on_rank, world, model_path, out, micro, mode, layout)
    reference = torch.cat([t.flatten() for t in load_file(str(tmp_path / "one piece.safetensors")).values()])
    assert reference.abs().max() > 1e-3  # the update moved the weights
    for name in list(runs)[1:]:
        update = torch.cat([t.flatten() for t in load_file(str(tmp_path / f"{name}.safetensors")).values()])
        error = float((update - reference).norm() / reference.norm())
        assert error < 1e-4, f"{mode}, {name}: relative error {error:.2e} against the whole mini-batch"
