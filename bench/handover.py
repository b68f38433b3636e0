"""The hand-over to a rollout pool of its own: one sender against several, per-tensor messages against buckets.

A split layout on CPU: the actor's FSDP ranks (``--actors``, gloo) hand their weights to one generation worker
(``RolloutRole``, hf engine) over the weight channel, ``--repeats`` times per setting, in one run:

- ``1 sender, per tensor``: the layout before buckets (the first rank sends each tensor in its own messages);
- ``1 sender, buckets``: the first rank sends, in buckets of ``--bucket-mb``;
- ``N senders, buckets``: every actor rank sends its share side by side.

Each hand-over is timed on the receiver, from the call to the last tensor loaded (its ranks' gathers
included); the weights it holds are compared with the actor's, bitwise. Prints each setting's median.

    python bench/handover.py [--actors 2] [--hidden 1024] [--layers 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import statistics
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from hybridrl.config.loader import load_config
from hybridrl.generation.weight_channel import ChannelPlan
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.testing.launch import run_ranks

logger = logging.getLogger("handover")
SPLIT = ["+resource_pool.pools.rollout_pool.GPU=1", "+resource_pool.mapping.rollout=rollout_pool"]


def _config(actors: int, model: str) -> list[str]:
    # The model's path, so that the config is a run of that model, not the built-in tiny run's preset (NO_SHARD)
    return [f"actor_rollout_ref.model.path={model}", f"resource_pool.pools.global_pool.GPU={actors}", *SPLIT]


def send(rank: int, world_size: int, model: str, plans: list[ChannelPlan], repeats: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    cfg = load_config(_config(world_size, model))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model, model)
    actor = ActorRolloutRole.from_config(cfg, ctx)
    for plan in plans:
        actor.open_weight_channel(plan)
        for _ in range(repeats):
            actor.weights.engine.weights_changed()  # new weights each time: a full hand-over
            actor.send_weights()
            dist.barrier()
        actor.weights.channel = None
    state = actor.engine.full_state_dict()  # a collective: every rank
    if rank == 0:
        torch.save({k: v.clone() for k, v in state.items()}, out)


def receive(model: str, actors: int, plans: list[ChannelPlan], repeats: int, out: str) -> None:
    import time

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.rollout import RolloutRole

    role = RolloutRole.from_config(
        load_config(_config(actors, model)), WorkerContext(0, 1, torch.device("cpu"), None, model, model)
    )
    seconds: list[list[float]] = []
    for plan in plans:
        role.open_weight_channel(plan)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            assert role.receive_weights()
            times.append(time.perf_counter() - started)
        seconds.append(times)
    state = {k: v.clone() for k, v in role.generation.engine.model.state_dict().items()}
    torch.save({"seconds": seconds, "state": state}, out)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--bucket-mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = ensure_tiny_model(
            Path(tmp, "model"),
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.hidden // 64,
            num_key_value_heads=args.hidden // 64,
            intermediate_size=args.hidden * 4,
            seed=0,
        )
        params = json.loads(Path(model, "config.json").read_text())
        stores = [dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False) for _ in range(3)]
        bucket = args.bucket_mb * 2**20
        settings = [
            ("1 sender, per tensor", ChannelPlan("127.0.0.1", stores[0].port, 1, 1, 1, 300.0)),
            ("1 sender, buckets", ChannelPlan("127.0.0.1", stores[1].port, 1, 1, bucket, 300.0)),
            (
                f"{args.actors} senders, buckets",
                ChannelPlan("127.0.0.1", stores[2].port, args.actors, 1, bucket, 300.0),
            ),
        ]
        plans = [plan for _, plan in settings]
        receiver = mp.get_context("spawn").Process(
            target=receive, args=(model, args.actors, plans, args.repeats, str(Path(tmp, "received.pt")))
        )
        receiver.start()
        run_ranks(send, args.actors, model, plans, args.repeats, str(Path(tmp, "sent.pt")))
        receiver.join(600)
        if receiver.exitcode != 0:
            raise SystemExit(f"the receiver failed (exit code {receiver.exitcode})")
        received, sent = torch.load(Path(tmp, "received.pt")), torch.load(Path(tmp, "sent.pt"))
    exact = all(torch.equal(received["state"][k], v) for k, v in sent.items())
    size_mb = sum(v.numel() * v.element_size() for v in sent.values()) / 2**20
    logger.info(
        "hidden %d, %d layers (%s), %.0f MB of weights, %d actor ranks -> 1 rollout worker; median of %d:",
        args.hidden,
        args.layers,
        params["model_type"],
        size_mb,
        args.actors,
        args.repeats,
    )
    base = statistics.median(received["seconds"][0])
    for (name, _), times in zip(settings, received["seconds"], strict=True):
        median = statistics.median(times)
        logger.info("  %-24s %7.3f s  %6.2f GB/s  %.2fx", name, median, size_mb / 1024 / median, base / median)
    logger.info("weights exact after the last hand-over: %s", exact)


if __name__ == "__main__":
    main()
