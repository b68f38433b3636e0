"""AdamW's step as the training engine builds it (multi-tensor ``foreach`` kernels, one parameter group per
tensor type) against the per-parameter loop that torch picks by itself on CPU, on 2 gloo ranks:

    .venv/bin/python bench/optimizer_step.py            # ~30 s on 2 CPU cores

For each layout (FSDP FULL_SHARD: every parameter a DTensor; Megatron-style tp=2: sharded DTensors beside
replicated tensors, two groups since one foreach call cannot mix them) it builds the actor's engine twice
from the same weights, gives both the same gradients, times ``optimizer.step()`` and checks that the weights
after the steps are bitwise equal. The model is the default run's tiny model (27 parameter tensors), where the
step is all dispatch; on a GPU torch already picks foreach for one type, and failed on the mixed one in one
group (engine/base.py ``optimizer_groups``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from hybridrl.config.loader import load_config
from hybridrl.testing.launch import run_ranks
from hybridrl.trainer.job import prepare_model

LAYOUTS = {
    "fsdp": ["actor_rollout_ref.actor.fsdp.sharding_strategy=FULL_SHARD"],  # the tiny run's preset replicates
    "megatron_tp2": [
        "actor_rollout_ref.actor.strategy=megatron",
        "actor_rollout_ref.actor.parallel_config.megatron.tp_size=2",
    ],
}


def on_rank(rank: int, world_size: int, layout: str, steps: int, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, distribute_tensor

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    cfg = load_config([f"resource_pool.pools.global_pool.GPU={world_size}", *LAYOUTS[layout]])
    mesh = init_device_mesh("cpu", (world_size,))
    result: dict[str, object] = {}
    engines = {}
    for mode in ("engine", "loop"):
        torch.manual_seed(0)
        ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, out + "/tiny_model", out + "/tiny_model")
        engine = ActorRolloutRole.from_config(cfg, ctx).engine
        assert engine.optimizer is not None
        for group in engine.optimizer.param_groups:
            result[f"{mode}_foreach"] = bool(group["foreach"])
            if mode == "loop":
                group["foreach"] = False
        params = [p for g in engine.optimizer.param_groups for p in g["params"]]
        generator = torch.Generator().manual_seed(1)
        for p in params:
            grad = torch.randn(p.shape, generator=generator)
            p.grad = distribute_tensor(grad, p.device_mesh, p.placements) if isinstance(p, DTensor) else grad
        engine.optimizer.step()  # the moments' first allocation, outside the timing
        engines[mode] = engine
    took: dict[str, list[float]] = {mode: [] for mode in engines}
    for _ in range(2):  # each mode twice, alternating: the fastest of each
        for mode, engine in engines.items():
            assert engine.optimizer is not None
            start = time.perf_counter()
            for _ in range(steps):
                engine.optimizer.step()
            took[mode].append((time.perf_counter() - start) / steps * 1e3)
    result.update({f"{mode}_ms": min(times) for mode, times in took.items()})
    weights = [engine.full_state_dict() for engine in engines.values()]
    result["bitwise_equal"] = all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    if rank == 0:
        Path(out, f"{layout}.json").write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        prepare_model(load_config([]), Path(out))  # the default run's tiny model, in out/tiny_model
        print(f"{'layout':14} {'engine':>18} {'loop':>10} {'speed-up':>9}  bitwise equal")
        for layout in LAYOUTS:
            run_ranks(on_rank, 2, layout, args.steps, out)
            r = json.loads(Path(out, f"{layout}.json").read_text())
            kind = "foreach" if r["engine_foreach"] else "loop"
            print(
                f"{layout:14} {r['engine_ms']:8.2f} ms ({kind:7}) {r['loop_ms']:7.2f} ms "
                f"{r['loop_ms'] / r['engine_ms']:8.2f}x  {r['bitwise_equal']}"
            )


if __name__ == "__main__":
    main()
