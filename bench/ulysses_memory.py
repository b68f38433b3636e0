"""Per-rank activation memory of one long sequence's actor update under Ulysses sequence parallelism.

One sequence of ``--tokens`` tokens (16 prompt tokens, the rest response) runs one actor update on sp = 1, 2
and 4 gloo ranks (``ulysses_sequence_parallel_size``; sp ranks form one replica). Per rank it reports:

- saved: the bytes autograd holds for the backward when the backward starts (every tensor the forward saved
  and its graph still holds, but the parameters, each storage counted once; ``saved_tensors_hooks``): the
  activation memory, deterministic;
- rss: the growth of the rank's peak resident set over the update (activations plus transients such as
  attention's workspace and the gradients; noisy, a second opinion).

sp=1 scores tokens from the hidden states too (``use_fused_kernels``), so the figures compare activations,
not a logits tensor that Ulysses never builds. CPU is fine: the figure is memory, not speed.

    python bench/ulysses_memory.py [--tokens 16384] [--sizes 1 2 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import tempfile
import weakref
from pathlib import Path

import torch

from hybridrl.config.loader import load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks

logger = logging.getLogger("ulysses_memory")
PROMPT = 16


def _batch(tokens: int, vocab: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (1, tokens), generator=g)
    response = tokens - PROMPT
    return Batch.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones(1, tokens, dtype=torch.long),
            "position_ids": torch.arange(tokens).unsqueeze(0),
            "responses": ids[:, PROMPT:].clone(),
            "response_mask": torch.ones(1, response, dtype=torch.long),
            "old_log_probs": torch.full((1, response), -2.8),
            "advantages": torch.randn(1, response, generator=g),
        },
        meta={"seed": 0},
    )


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def measure(rank: int, world_size: int, model_path: str, tokens: int, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={model_path}",  # a run of this model, not the tiny run's preset
            "data.train_batch_size=1",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.model.use_fused_kernels=true",
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={world_size}",
            f"resource_pool.pools.global_pool.GPU={world_size}",
        ]
    )
    mesh = init_device_mesh("cpu", (world_size,))
    actor = ActorRolloutRole.from_config(
        cfg, WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
    )
    batch = _batch(tokens, len(actor.tokenizer))
    saved: list[weakref.ref] = []
    at_backward: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if not isinstance(tensor, torch.nn.Parameter):  # weights saved for the backward are not activations
            saved.append(weakref.ref(tensor))
        return tensor

    def unpack(tensor: torch.Tensor) -> torch.Tensor:
        if not at_backward:  # the backward's first read: everything the forward saved and kept is alive now
            storages = {}
            for ref in saved:
                alive = ref()
                if alive is not None and alive.device.type == "cpu":
                    storage = alive.untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
            at_backward.append(sum(storages.values()))
        return tensor

    before = _peak_rss_bytes()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        actor.update_actor(batch)
    rss = _peak_rss_bytes() - before
    saved_bytes = at_backward[0]
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"saved": saved_bytes, "rss": rss}))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # 8 heads over 4 key/value heads (grouped-query, as Qwen and Llama): every size up to 4 divides them.
        model = ensure_tiny_model(
            Path(tmp, "model"),
            hidden_size=256,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=4,
            intermediate_size=1024,
            seed=0,
        )
        results = {}
        for size in args.sizes:
            out = Path(tmp, f"sp{size}")
            out.mkdir()
            run_ranks(measure, size, model, args.tokens, str(out))
            ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(size)]
            results[size] = (max(r["saved"] for r in ranks), max(r["rss"] for r in ranks))
    base_saved, base_rss = results[args.sizes[0]]
    logger.info("one sequence of %d tokens, actor update, largest rank's figures:", args.tokens)
    logger.info("%4s %14s %8s %12s %8s", "sp", "saved GB", "ratio", "rss GB", "ratio")
    for size, (saved, rss) in results.items():
        logger.info(
            "%4d %14.3f %8.2f %12.3f %8.2f", size, saved / 1e9, saved / base_saved, rss / 1e9, rss / max(base_rss, 1)
        )


if __name__ == "__main__":
    main()
