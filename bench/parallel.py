"""Benchmark: each FSDP sharding strategy and Megatron-style layout (tensor, sequence, pipeline
parallel) on 2 and 4 local gloo ranks, same model and global batch.

Prints per strategy and world size: training step time (forward + backward of a token-level loss over
4 micro-batches per replica, then the optimizer step), peak memory per rank (RSS high-water mark, which
includes the process's baseline), and the bytes each rank sends per step, estimated from the parameter
and activation sizes (gloo does not report traffic). A figure, not a test.

    .venv/bin/python bench/parallel.py [--hidden 256] [--layers 4] [--steps 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import tempfile
import time
from pathlib import Path

import torch

from hybridrl.testing.launch import run_ranks

# (ranks, strategy, HYBRID_SHARD group or Megatron (tp, pp, sequence_parallel))
CASES = [
    (2, "FULL_SHARD", None),
    (2, "SHARD_GRAD_OP", None),
    (2, "NO_SHARD", None),
    (2, "megatron", (2, 1, False)),
    (2, "megatron", (2, 1, True)),
    (2, "megatron", (1, 2, False)),
    (4, "FULL_SHARD", None),
    (4, "SHARD_GRAD_OP", None),
    (4, "NO_SHARD", None),
    (4, "HYBRID_SHARD", 2),
    (4, "megatron", (2, 1, True)),
    (4, "megatron", (4, 1, True)),
    (4, "megatron", (2, 2, True)),
    (4, "megatron", (1, 4, False)),
]
MICRO = 4  # micro-batches per data-parallel replica per step (the pipeline's micro-batches)


def comm_bytes_per_rank(params: int, world: int, strategy: str, group: int | None, bytes_per: int = 4) -> float:
    """Ring-collective bytes each rank sends per step (one forward, one backward, one optimizer step)."""
    p = params * bytes_per
    if strategy == "NO_SHARD":  # all-reduce of the gradients
        return 2 * p * (world - 1) / world
    g = group if strategy == "HYBRID_SHARD" else world
    gather = p * (g - 1) / g  # one all-gather of the parameters inside the shard group
    gathers = 2 if strategy in ("FULL_SHARD", "HYBRID_SHARD") else 1  # re-gather for backward
    scatter = p * (g - 1) / g  # reduce-scatter of the gradients
    replicas = world // g
    allreduce = 2 * (p / g) * (replicas - 1) / replicas if replicas > 1 else 0.0  # across replicas
    return gathers * gather + scatter + allreduce


def megatron_comm_bytes_per_rank(
    params: int, act: float, layers: int, tp: int, pp: int, dp: int, bytes_per: int = 4
) -> float:
    """Bytes a rank sends per step: tensor parallel's 4 all-reduces per layer of the replica's activations
    ``act`` (2 forward, 2 backward; sequence parallel's all-gather + reduce-scatter move the same), the
    pipeline's activations forward and gradients backward across each stage boundary, and the
    data-parallel gradient all-reduce of this rank's slice of the parameters."""
    tp_bytes = 4 * (layers / pp) * 2 * act * (tp - 1) / tp if tp > 1 else 0.0
    pp_bytes = 2 * act / tp if pp > 1 else 0.0
    dp_bytes = 2 * (params * bytes_per / (tp * pp)) * (dp - 1) / dp if dp > 1 else 0.0
    return tp_bytes + pp_bytes + dp_bytes


def build_engine(world: int, model_dir: str, strategy: str, option) -> object:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.config.choices import ShardingStrategy, Strategy
    from hybridrl.config.schema import ActorConfig, FSDPConfig, MegatronConfig, OptimConfig, ParallelConfig
    from hybridrl.engine.factory import make_engine
    from hybridrl.models.loader import empty_causal_lm

    mesh = init_device_mesh("cpu", (world,))
    section = ActorConfig(optim=OptimConfig(lr=1e-4))
    if strategy == "megatron":
        tp, pp, sp = option
        megatron = MegatronConfig(tp_size=tp, pp_size=pp, sequence_parallel=sp)
        section = dataclasses.replace(
            section, strategy=Strategy.megatron, parallel_config=ParallelConfig(megatron=megatron)
        )
    else:
        fsdp = FSDPConfig(
            sharding_strategy=ShardingStrategy(strategy),
            shard_group_size=option if strategy == "HYBRID_SHARD" else None,
        )
        section = dataclasses.replace(section, fsdp=fsdp)
    model, weights = empty_causal_lm(model_dir)
    return make_engine(model, section, mesh=mesh, device=torch.device("cpu"), train=True, weights=weights)


def worker(
    rank: int, world: int, model_dir: str, strategy: str, option, steps: int, batch: int, seq: int, out: str
) -> None:
    from hybridrl.protocol import Batch

    torch.manual_seed(0)
    engine = build_engine(world, model_dir, strategy, option)
    vocab = engine.model.config.vocab_size
    rows = batch // engine.dp_size
    ids = torch.randint(0, vocab, (rows, seq), generator=torch.Generator().manual_seed(engine.dp_rank))
    data = Batch.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(seq).expand(rows, -1).clone(),
        }
    )

    def loss_fn(logits: torch.Tensor, mb: Batch) -> tuple[torch.Tensor, dict]:
        targets = mb.tensors["input_ids"][:, 1:]
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1)), {}

    times = []
    for _ in range(steps):
        torch.distributed.barrier()
        start = time.perf_counter()
        engine.forward_backward(data.minibatches(rows // MICRO), loss_fn)
        engine.step(1.0)
        times.append(time.perf_counter() - start)
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    Path(out, f"rank{rank}.json").write_text(json.dumps({"times": times, "peak_gb": peak_gb}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=16, help="global sequences per step")
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    from hybridrl.models.loader import load_causal_lm
    from hybridrl.models.tiny import ensure_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = ensure_tiny_model(
            Path(tmp) / "model",
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=4 * args.hidden,
            seed=0,
        )
        params = sum(p.numel() for p in load_causal_lm(model_dir).parameters())
        print(
            f"model: {params / 1e6:.2f}M parameters, {args.layers} layers, hidden {args.hidden}; "
            f"global batch {args.batch} x {args.seq} tokens; {args.steps} steps, first left out"
        )
        print(f"{'ranks':>5}  {'strategy':<26}{'step s':>8}{'peak GB/rank':>14}{'sent MB/rank/step (est.)':>26}")
        for index, (world, strategy, option) in enumerate(CASES):
            out = Path(tmp) / f"case{index}"
            out.mkdir()
            run_ranks(worker, world, model_dir, strategy, option, args.steps, args.batch, args.seq, str(out))
            ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]
            step = max(sum(r["times"][1:]) / (len(r["times"]) - 1) for r in ranks)
            peak = max(r["peak_gb"] for r in ranks)
            if strategy == "megatron":
                tp, pp, sp = option
                dp = world // (tp * pp)
                act = args.batch / dp * args.seq * args.hidden * 4
                sent = megatron_comm_bytes_per_rank(params, act, args.layers, tp, pp, dp) / 2**20
                label = f"megatron tp{tp} pp{pp} dp{dp}" + (" sp" if sp else "")
            else:
                sent = comm_bytes_per_rank(params, world, strategy, option) / 2**20
                label = strategy + (f"({option})" if option else "")
            print(f"{world:>5}  {label:<26}{step:>8.3f}{peak:>14.2f}{sent:>26.1f}")


if __name__ == "__main__":
    main()
