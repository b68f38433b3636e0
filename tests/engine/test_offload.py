"""Offloading an idle role's parameters and optimizer state to the host and back changes nothing."""

from __future__ import annotations

import logging

import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.engine.offload import Offloader
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import make_batch, overrides
from tests.tiny_models import tiny

LAYOUTS = {
    "fsdp": [],
    "megatron_tp2": [
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.parallel_config.megatron.tp_size=2",
    ],
}


def _storage(param: torch.Tensor) -> torch.UntypedStorage:
    local = param.to_local() if hasattr(param, "to_local") else param  # a DTensor's shard
    return local.untyped_storage()


def train_on_rank(rank: int, world_size: int, model_path: str, out_dir: str, layout: str, offload: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, "FULL_SHARD", tuple(LAYOUTS[layout])))
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    actor = ActorRolloutRole.from_config(cfg, ctx)
    if offload:
        # On the host the offloader is off by design; switch it on to run real host-to-host round trips.
        actor.offload.params = actor.offload.optimizer_state = True
        actor.offload.offload()
        ctx.recorder.drain()
    dp_rank, dp_size, _ = actor.dp_layout("update_actor")
    shard = make_batch(len(actor.tokenizer)).split(dp_size)[dp_rank]
    # Held, so the allocator cannot hand their addresses to a later allocation: a parameter whose storage
    # address changes has really moved (an address alone could come back by allocator luck).
    held = [_storage(p) for p in actor.engine.model.parameters()]
    pointers = [s.data_ptr() for s in held]
    for _ in range(2):
        actor.update_actor(shard)
        actor.compute_log_prob(shard)
    if offload:
        spans = [s.name for s in ctx.recorder.drain()]
        assert spans.count("reload") == 4 and spans.count("offload") == 4, spans
        assert actor.offload.offloaded_params and actor.offload.offloaded_optimizer
        moved = [_storage(p).data_ptr() for p in actor.engine.model.parameters()]
        assert all(a != b for a, b in zip(pointers, moved) if a), "the parameters never moved"
    with actor.offload.resident(optimizer=True):
        state = {k: v.clone() for k, v in actor.engine.full_state_dict().items()}
        optim = actor.engine.optimizer.state_dict()["state"]
        for i, entry in optim.items():
            for key, value in entry.items():
                if torch.is_tensor(value) and value.dim() > 0:
                    local = value.to_local() if hasattr(value, "to_local") else value
                    state[f"optim/{i}/{key}"] = local.clone()
    save_file(state, f"{out_dir}/{layout}_{int(offload)}_rank{rank}.safetensors")


def test_offload_round_trips_are_bitwise(tmp_path):
    model_path = tiny(str(tmp_path / "tiny"))
    for layout in LAYOUTS:
        for offload in (False, True):
            run_ranks(train_on_rank, 2, model_path, str(tmp_path), layout, offload)
        for rank in range(2):
            plain = load_file(str(tmp_path / f"{layout}_0_rank{rank}.safetensors"))
            moved = load_file(str(tmp_path / f"{layout}_1_rank{rank}.safetensors"))
            assert plain.keys() == moved.keys()
            for key in plain:
                assert torch.equal(plain[key], moved[key]), f"{layout}: {key} changed by offloading"


def test_offload_on_the_host_says_so_once_and_does_nothing(caplog):
    model = torch.nn.Linear(4, 4)
    with caplog.at_level(logging.INFO):
        offloader = Offloader(
            model, None, torch.device("cpu"), params=True, optimizer_state=True, what="actor", span=None
        )
    assert "no effect" in caplog.text
    pointer = model.weight.data_ptr()
    with offloader.resident(optimizer=True):
        pass
    assert model.weight.data_ptr() == pointer and not offloader.offloaded_params
