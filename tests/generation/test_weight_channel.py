"""The weight channel between worker groups: every tensor arrives exact, in its dtype and shape, with its
name, from every sender, whatever the bucket size; and the actor's FSDP ranks hand their trained weights to
a generation worker of another group, both sending."""

from __future__ import annotations

import multiprocessing as mp

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.generation.weight_channel import ChannelPlan, Piece, WeightChannel
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import make_batch, overrides
from tests.tiny_models import tiny

TENSORS = {
    "a.weight": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),
    "b.bias": torch.arange(5, dtype=torch.bfloat16),
    "steps": torch.tensor(7, dtype=torch.int64),  # 0-d
    "mask": torch.tensor([[True, False]]),
    "ünïcode.name": torch.ones(2, 1, 1, 2, dtype=torch.float16),
}


@pytest.fixture
def port():
    """A store the test hosts, as a launcher would: every rank, the sending one too, is its client."""
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False)
    yield store.port
    del store


def channel_rank(rank: int, size: int, port: int, senders: int, bucket_bytes: int, out_dir: str) -> None:
    channel = WeightChannel(
        "127.0.0.1", port, rank, size, torch.device("cpu"), 60, senders=senders, bucket_bytes=bucket_bytes
    )
    out = f"{out_dir}/{rank}.pt"
    if rank < senders:
        torch.save(channel.send(iter(TENSORS.items())), out)  # the bytes this sender sent
        return
    torch.save([(name, tensor.clone()) for name, tensor in channel.receive()], out)  # views into a bucket


@pytest.mark.parametrize("senders,bucket_bytes", [(1, 2**20), (2, 1), (3, 40)])
def test_every_tensor_arrives_exact_with_its_name_dtype_and_shape(tmp_path, port, senders, bucket_bytes):
    """One bucket of everything from one sender; a bucket per tensor from two; three senders, some with
    nothing to send."""
    size = senders + 2
    run_ranks(channel_rank, size, port, senders, bucket_bytes, str(tmp_path))
    sent = sum(torch.load(tmp_path / f"{r}.pt") for r in range(senders))
    assert sent == sum(t.numel() * t.element_size() for t in TENSORS.values())
    for r in range(senders, size):
        received = dict(torch.load(tmp_path / f"{r}.pt"))
        assert sorted(received) == sorted(TENSORS)
        for name, expected in TENSORS.items():
            tensor = received[name]
            assert tensor.dtype == expected.dtype and tensor.shape == expected.shape, name
            assert torch.equal(tensor, expected), name


def pieces_rank(rank: int, size: int, port: int, out_dir: str) -> None:
    """Two senders each send their rows of every tensor (as FSDP shards them: torch.chunk of dim 0)."""
    channel = WeightChannel("127.0.0.1", port, rank, size, torch.device("cpu"), 60, senders=2, bucket_bytes=24)
    if rank < 2:
        mine = []
        for name, tensor in TENSORS.items():
            if tensor.dim() == 0:
                continue
            chunks = torch.chunk(tensor, 2)
            start = sum(len(c) for c in chunks[:rank])
            part = chunks[rank] if rank < len(chunks) else tensor[:0]
            mine.append(Piece(name, part, start, tensor.shape[0]))
        channel.send_pieces(mine)
        return
    torch.save([(name, tensor.clone()) for name, tensor in channel.receive()], f"{out_dir}/{rank}.pt")


def test_shards_from_every_sender_arrive_as_whole_tensors(tmp_path, port):
    run_ranks(pieces_rank, 3, port, str(tmp_path))
    received = dict(torch.load(tmp_path / "2.pt"))
    expected = {k: v for k, v in TENSORS.items() if v.dim() > 0}
    assert sorted(received) == sorted(expected)  # a tensor of one row: the second sender's piece is empty
    for name, tensor in expected.items():
        assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name


ROLLOUT_POOL = ("+resource_pool.pools.rollout_pool.GPU=1", "+resource_pool.mapping.rollout=rollout_pool")


def channel_plan(port: int) -> ChannelPlan:
    """Both actor ranks send, in small buckets, to one rollout worker."""
    return ChannelPlan("127.0.0.1", port, senders=2, receivers=1, bucket_bytes=4096, timeout_s=60)


def send_on_rank(rank: int, world_size: int, model_path: str, port: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    cfg = load_config(overrides(world_size, "FULL_SHARD", ROLLOUT_POOL))
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    actor = ActorRolloutRole.from_config(cfg, ctx)
    assert actor.rollout is None  # the rollout pool generates: no generation copy on the actor's workers
    actor.update_actor(make_batch(len(actor.tokenizer)).split(world_size)[rank])  # weights unlike the files'
    actor.open_weight_channel(channel_plan(port))
    sent = actor.send_weights()
    again = actor.send_weights()  # nothing changed: an empty stream, the receivers keep their weights
    state = actor.engine.full_state_dict()
    assert sent > 0 and again == 0  # both ranks send their share
    if rank == 0:
        save_file({k: v.contiguous() for k, v in state.items()}, out)


def receive_in_process(model_path: str, port: int, out: str) -> None:
    from hybridrl.engine.context import WorkerContext
    from hybridrl.protocol import Batch
    from hybridrl.workers.rollout import RolloutRole

    cfg = load_config(overrides(2, "FULL_SHARD", ROLLOUT_POOL))
    role = RolloutRole.from_config(cfg, WorkerContext(0, 1, torch.device("cpu"), None, model_path, model_path))
    role.open_weight_channel(channel_plan(port))
    assert role.receive_weights() is True
    assert role.receive_weights() is False  # the actor said nothing changed
    model = role.generation.engine.model  # the hf engine's copy
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)
    prompts = Batch.from_dict(
        tensors={"input_ids": torch.tensor([[5, 6, 7]] * 2), "attention_mask": torch.ones(2, 3, dtype=torch.long)},
        meta={"seed": 1},
    )
    assert role.generate(prompts).tensors["responses"].shape[0] == 2


def test_the_actors_fsdp_ranks_hand_their_weights_to_another_group(tmp_path, port):
    model_path = tiny(tmp_path / "m")
    receiver = mp.get_context("spawn").Process(
        target=receive_in_process, args=(model_path, port, str(tmp_path / "received.safetensors"))
    )
    receiver.start()
    run_ranks(send_on_rank, 2, model_path, port, str(tmp_path / "sent.safetensors"))
    receiver.join(120)
    assert receiver.exitcode == 0
    sent, received = load_file(tmp_path / "sent.safetensors"), load_file(tmp_path / "received.safetensors")
    initial = load_file(tmp_path / "m" / "model.safetensors")
    assert any(not torch.equal(sent[k], initial[k]) for k in initial)  # the update moved the weights
    for k, v in sent.items():
        assert torch.equal(received[k], v), k
