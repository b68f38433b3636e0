"""The streamed hand-over to the generation engine: exact, in the engine's dtype, and skipped when the
weights have not changed since the last one."""

from __future__ import annotations

import torch

from hybridrl.config.loader import load_config
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import make_batch, overrides
from tests.tiny_models import tiny


def handover_on_rank(rank: int, world_size: int, model_path: str, rollout_dtype: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, "FULL_SHARD", (f"actor_rollout_ref.rollout.dtype={rollout_dtype}",)))
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    actor = ActorRolloutRole.from_config(cfg, ctx)
    expected = torch.float32 if rollout_dtype == "auto" else torch.bfloat16
    assert all(p.dtype == expected for p in actor.rollout.model.parameters())

    def check_equal() -> None:
        full = actor.engine.full_state_dict()
        generation = actor.rollout.model.state_dict()
        assert all(torch.equal(full[k].to(expected), generation[k]) for k in full), "hand-over not exact"

    check_equal()  # the constructor's hand-over filled the empty generation copy
    handovers: list[int] = []
    load_weights = actor.rollout.load_weights
    actor.rollout.load_weights = lambda weights: (handovers.append(1), load_weights(weights))[1]
    ctx.recorder.drain()
    prompts = Batch.from_dict(
        tensors={"input_ids": torch.tensor([[5, 6, 7]] * 2), "attention_mask": torch.ones(2, 3, dtype=torch.long)},
        meta={"seed": 1},
    )
    actor.generate(prompts)
    actor.generate(prompts)  # validation, a DAPO round, ReMax's greedy pass: same weights
    assert not handovers
    assert [s.name for s in ctx.recorder.drain()].count("weight_sync") == 2  # timed (empty) all the same
    shard = make_batch(len(actor.tokenizer)).split(world_size)[rank]
    actor.update_actor(shard)
    actor.generate(prompts)
    actor.generate(prompts)
    assert len(handovers) == 1
    check_equal()


def test_handover_is_exact_and_skipped_when_unchanged(tmp_path):
    model_path = tiny(str(tmp_path / "tiny"))
    for rollout_dtype in ("auto", "bfloat16"):
        run_ranks(handover_on_rank, 2, model_path, rollout_dtype)
