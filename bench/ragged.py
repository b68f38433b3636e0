"""Benchmark: a ragged rollout batch through the actor on 2 CPU workers, padded vs packed. A figure, not a test.

    .venv/bin/python bench/ragged.py [--rows 64] [--baseline-src DIR]

The batch: ``--rows`` sequences of a 32-token prompt (left padding up to 8) and a response whose length is
uniform in [8, 256], as RL rollouts are. The model: Qwen2-shaped, hidden 256, 4 layers, 4 heads, 2 KV heads,
FFN 1024, a 32k vocabulary (about 21M parameters). Two paths on the same code, same run:

- padded: micro-batches of a fixed row count, every row padded to the longest prompt + 256 (today's default);
- packed: ``use_remove_padding`` + ``use_dynamic_bsz`` (micro-batches of up to ``--max-tokens`` real
  tokens, 2048 by default: about the 8 x 288 slots of a padded micro-batch), rows balanced over the workers by tokens (``trainer.balance_batch``).

A third path adds ``use_fused_kernels`` (log-probs from the hidden states, no logits tensor).

Printed: real tokens per second of the old-log-prob pass and of one PPO update over the batch, and the
peak host memory the log-prob pass adds on a worker at a 32k and a 152k vocabulary (``VmHWM`` reset
before the pass), each against the first path. ``--baseline-src DIR`` (``git worktree add DIR REV``) adds that revision's padded path
to both tables, e.g. the revision before the compute-path work (681ecf7), whose passes computed logits at
every position and made fp32 copies of the (rows, length, vocab) slice.

Each measurement runs in its own process (its own 2 ranks), so peaks do not carry over.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

logger = logging.getLogger("bench.ragged")
GB = 2**30
PROMPT, MAX_RESPONSE = 32, 256
SHAPE = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=1024)
COMMON = [
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.rollout.n=1",
    "data.max_prompt_length=40",
    f"data.max_response_length={MAX_RESPONSE}",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "critic.ppo_micro_batch_size_per_gpu=8",  # (no critic is built; its batch arithmetic is still checked)
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
]
PACKED = [
    "actor_rollout_ref.model.use_remove_padding=true",
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
]
#: The paths measured, by name: their overrides on top of COMMON (the packed ones add the token budget).
PATHS = {
    "padded": [],
    "packed": PACKED,
    "packed + fused": [*PACKED, "actor_rollout_ref.model.use_fused_kernels=true"],
}


# -- the model and the batch ---------------------------------------------------------------------------
def write_model(directory: Path, vocab: int) -> None:
    """A Qwen2-shaped model with ``vocab`` rows (random weights) beside the tiny tokenizer's files."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from hybridrl.models.tiny import ensure_tiny_model

    tokenizer_dir = ensure_tiny_model(directory / "tokenizer", **SHAPE, seed=0)
    config = Qwen2Config.from_pretrained(tokenizer_dir, vocab_size=vocab, tie_word_embeddings=False)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(directory / f"v{vocab}")


def ragged_batch(rows: int, vocab: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(0)
    length = PROMPT + MAX_RESPONSE
    ids = torch.from_numpy(rng.integers(3, vocab, size=(rows, length)))
    attention = torch.ones(rows, length, dtype=torch.long)
    response_mask = torch.zeros(rows, MAX_RESPONSE, dtype=torch.long)
    for row in range(rows):
        attention[row, : rng.integers(0, 9)] = 0
        stop = int(rng.integers(8, MAX_RESPONSE + 1))
        response_mask[row, :stop] = 1
        attention[row, PROMPT + stop :] = 0
    ids = ids * attention
    return {
        "input_ids": ids,
        "attention_mask": attention,
        "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
        "responses": ids[:, PROMPT:].clone(),
        "response_mask": response_mask,
        "old_log_probs": torch.full((rows, MAX_RESPONSE), -3.0),
        "advantages": torch.from_numpy(rng.standard_normal((rows, MAX_RESPONSE)).astype(np.float32)),
    }


def shard_rows(attention: torch.Tensor, world: int, balance: bool) -> list[np.ndarray]:
    """Each rank's rows: contiguous (padded path) or balanced by tokens (``trainer.balance_batch``)."""
    if not balance:
        return np.array_split(np.arange(len(attention)), world)
    from hybridrl.data.partition import balanced_partition

    return balanced_partition(attention.sum(-1).tolist(), world, equal_size=True)


# -- host memory (written here so that a baseline revision without the helpers runs the same code) -----
def _status(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024 / GB
    return 0.0


def _reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


# -- one measurement on each rank ----------------------------------------------------------------------
def on_rank(rank: int, world: int, root: str, vocab: int, overrides: list[str], rows: int, timed: bool) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.config.loader import load_config
    from hybridrl.engine.context import WorkerContext
    from hybridrl.protocol import Batch
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    try:  # as worker processes do, where the revision has it: freed memory goes back to the OS
        from hybridrl.workers.host_memory import return_freed_memory

        return_freed_memory()
    except ImportError:
        pass
    torch.manual_seed(0)
    cfg = load_config(
        [
            f"actor_rollout_ref.model.path={root}/v{vocab}",  # a run of this model, not the tiny run's preset
            f"actor_rollout_ref.model.tokenizer_path={root}/tokenizer",
            f"data.train_batch_size={rows}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}",
            f"critic.ppo_mini_batch_size={rows}",
            *overrides,
        ]
    )
    ctx = WorkerContext(
        rank, world, torch.device("cpu"), init_device_mesh("cpu", (world,)), f"{root}/v{vocab}", f"{root}/tokenizer"
    )
    actor = ActorRolloutRole.from_config(cfg, ctx)
    tensors = ragged_batch(rows, vocab)
    balance = any("use_remove_padding=true" in o for o in overrides)  # as trainer.balance_batch does
    mine = shard_rows(tensors["attention_mask"], world, balance)[rank]
    shard = Batch.from_dict(tensors={k: v[mine].contiguous() for k, v in tensors.items()}, meta={"seed": 1})
    result: dict[str, float] = {"tokens": float(tensors["attention_mask"].sum())}
    actor.compute_log_prob(shard)  # warm-up: first-call allocations and thread pools
    gc.collect()
    base = _status("VmRSS")
    _reset_peak()
    dist.barrier()
    start = time.perf_counter()
    actor.compute_log_prob(shard)
    dist.barrier()
    result["log_prob_s"] = time.perf_counter() - start
    result["log_prob_added_gb"] = _status("VmHWM") - base
    if timed:
        actor.update_actor(shard)  # warm-up
        dist.barrier()
        start = time.perf_counter()
        actor.update_actor(shard)
        dist.barrier()
        result["update_s"] = time.perf_counter() - start
    peaks = [None] * world
    dist.all_gather_object(peaks, result["log_prob_added_gb"])
    result["log_prob_added_gb"] = max(peaks)
    if rank == 0:
        Path(root, "result.json").write_text(json.dumps(result))


def worker_main(args: argparse.Namespace) -> None:
    from hybridrl.testing.launch import run_ranks

    budget = [
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={args.max_tokens}",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={args.max_tokens}",
    ]
    extra = PATHS[args.path]
    overrides = COMMON + extra + (budget if extra else [])
    run_ranks(on_rank, 2, args.root, args.vocab, overrides, args.rows, args.timed)


# -- the driver ----------------------------------------------------------------------------------------
def measure(
    source: Path, root: Path, vocab: int, rows: int, path: str, timed: bool, max_tokens: int
) -> dict[str, float]:
    out = root / "result.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--worker", "--root", str(root), "--vocab", str(vocab), "--rows", str(rows)]
    cmd += ["--max-tokens", str(max_tokens)]
    cmd += ["--path", path] + ["--timed"] * timed
    env = {**os.environ, "PYTHONPATH": str(source)}
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=2048, help="the packed path's token budget per micro-batch")
    parser.add_argument("--baseline-src", type=Path, help="a checkout of the revision to compare memory against")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", choices=list(PATHS), help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    here = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for vocab in (32_768, 151_936):
            write_model(root, vocab)
        tokens = float(ragged_batch(args.rows, 32_768)["attention_mask"].sum())
        padded_tokens = args.rows * (PROMPT + MAX_RESPONSE)
        logger.info(
            "%d rows: %d real tokens of %d padded (%.0f%%)",
            args.rows,
            tokens,
            padded_tokens,
            100 * tokens / padded_tokens,
        )
        sources = {name: (here, name) for name in PATHS}
        if args.baseline_src:
            sources = {"baseline padded": (args.baseline_src.resolve(), "padded"), **sources}
        speed = {
            name: measure(src, root, 32_768, args.rows, path, True, args.max_tokens)
            for name, (src, path) in sources.items()
        }
        first = next(iter(speed))  # the baseline revision where given, else today's padded path
        logger.info("%-16s %16s %16s %10s %10s", "path", "log-prob tok/s", "update tok/s", "log-prob x", "update x")
        for name, r in speed.items():
            logger.info(
                "%-16s %16.0f %16.0f %9.2fx %9.2fx",
                name,
                r["tokens"] / r["log_prob_s"],
                r["tokens"] / r["update_s"],
                speed[first]["log_prob_s"] / r["log_prob_s"],
                speed[first]["update_s"] / r["update_s"],
            )
        logger.info("(x: speed-up over %s)", first)
        logger.info("%-16s %10s %22s %10s", "path", "vocab", "log-prob pass adds GB", "less")
        for vocab in (32_768, 151_936):
            added = {
                name: measure(src, root, vocab, args.rows, path, False, args.max_tokens)["log_prob_added_gb"]
                for name, (src, path) in sources.items()
            }
            for name, gb in added.items():
                logger.info("%-16s %10d %22.2f %9.1fx", name, vocab, gb, added[first] / max(gb, 1e-3))


if __name__ == "__main__":
    main()
