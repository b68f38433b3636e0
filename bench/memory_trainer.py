"""Benchmark: each worker's peak memory over a whole training run, on 1 and on 4 CPU workers.

A GRPO run with a KL loss (actor + reference model, colocated) on a Qwen2-shaped model of about 243M
parameters (hidden 1024, 16 layers, 16 heads, 4 KV heads, FFN 4096), 2 steps at the defaults (micro-batches of 16 sequences, so that 4 workers divide them). Prints the
largest per-rank peak RSS (``perf/<group>/peak_rss_gb``, the process's lifetime peak) for each worker count,
and the ratio 4 workers / 1 worker: sharding must make it fall well below 1.

    .venv/bin/python bench/memory_trainer.py [--workers 1 4] [--baseline-src DIR] [key=value ...]

``--baseline-src DIR``: also run a checkout of another revision (``git worktree add DIR REV``) first, in
the same run, for a before/after table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

logger = logging.getLogger("bench.memory_trainer")

MODEL = [
    "actor_rollout_ref.model.tiny.hidden_size=1024",
    "actor_rollout_ref.model.tiny.num_hidden_layers=16",
    "actor_rollout_ref.model.tiny.num_attention_heads=16",
    "actor_rollout_ref.model.tiny.num_key_value_heads=4",
    "actor_rollout_ref.model.tiny.intermediate_size=4096",
]
GRPO_KL = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=true"]
# The default micro-batch (32 sequences) does not divide 4 workers' share of a mini-batch (16): use 16 for
# every worker count, so that only the worker count changes.
BATCH = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"]


def peak_gb(source: Path, workers: int, overrides: list[str]) -> float:
    """The largest per-rank peak RSS of any worker group over a 2-step run of ``source``'s code."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            "-m",
            "hybridrl.trainer.main_ppo",
            "trainer.total_steps=2",
            "trainer.test_freq=-1",
            "trainer.save_freq=-1",
            "trainer.save_hf=false",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
            f"trainer.output_dir={out}",
            f"resource_pool.pools.global_pool.GPU={workers}",
            *MODEL,
            *GRPO_KL,
            *BATCH,
            *overrides,
        ]
        env = {**os.environ, "PYTHONPATH": str(source)}
        subprocess.run(cmd, cwd=source, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines() if line]
    peaks = [v for row in rows for k, v in row.items() if k.startswith("perf/") and k.endswith("/peak_rss_gb")]
    return max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--baseline-src", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sources = {"this": Path(__file__).resolve().parents[1]}
    if args.baseline_src:
        sources = {"baseline": args.baseline_src.resolve(), **sources}
    table: dict[str, dict[int, float]] = {}
    for label, source in sources.items():
        for workers in args.workers:
            table.setdefault(label, {})[workers] = peak_gb(source, workers, args.overrides)
            logger.info("%-9s %d worker(s): peak RSS per rank %.2f GB", label, workers, table[label][workers])
    lo, hi = min(args.workers), max(args.workers)
    for label, peaks in table.items():
        logger.info("%-9s %d/%d workers: %.0f%% of the %d-worker peak", label, hi, lo, 100 * peaks[hi] / peaks[lo], lo)


if __name__ == "__main__":
    main()
