"""Throughput with long-tailed response lengths (issue #30): the synchronous split layout, the one-step overlap
and fully asynchronous training with partial rollouts, on 1 training + 1 generation worker, the same number of
steps and samples each, one run after another on this machine.

    python bench/long_tail.py                      # 150 steps per layout
    python bench/long_tail.py --steps 30 --layouts sync,async
    python bench/long_tail.py trainer.seed=2       # overrides added to every layout

The setting: the built-in copy task with responses of up to 256 tokens, 16 prompts x 16 samples a step (one
mini-batch, 2 epochs), packed (padding-free) training, the same in every layout. The tiny model ends a response
with its end token about once in 17 tokens, so lengths are geometric: a mean near 20, and the longest of a
step's 256 near 100-150. A synchronous step's generation lasts as long as its longest response; the update
only costs its real tokens.

Per layout it prints the training throughput (samples trained per second over steps 2-N: step 1 holds the
one-time start-up), the response lengths (mean, and the mean over steps of each step's longest), the trainer's
wait for samples, and the learning gain (the mean score of the last 20 steps less that of the first 20).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from subprocess_run import run_main_ppo

logger = logging.getLogger("bench.long_tail")

SPLIT_1_1 = [
    "resource_pool.pools.global_pool.GPU=1",
    "+resource_pool.pools.rollout_pool.GPU=1",
    "+resource_pool.mapping.rollout=rollout_pool",
]
PROMPTS, N = 16, 16  # a step's prompts (one mini-batch) and samples per prompt
SETTING = [
    "data.max_response_length=256",
    f"actor_rollout_ref.rollout.n={N}",
    f"data.train_batch_size={PROMPTS}",
    f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
    "actor_rollout_ref.actor.ppo_epochs=2",
    "actor_rollout_ref.model.use_remove_padding=true",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.save_hf=false",
]
ASYNC = [
    "async_training.enable=true",
    "async_training.staleness_threshold=1",
    "async_training.trigger_parameter_sync_step=1",
    "async_training.require_batches=1",  # a step is one mini-batch, as above (verl's advice for streaming)
]
LAYOUTS: dict[str, list[str]] = {
    "sync": [],
    "overlap": ["actor_rollout_ref.rollout.overlap=true"],
    "async": [*ASYNC, "async_training.partial_rollout=true"],
    # AReaL's decoupled PPO: the ratio against the trainer's weights, importance weights to the generator's
    "async_prox": [*ASYNC, "async_training.partial_rollout=true", "async_training.compute_prox_log_prob=true"],
    # the same without partial rollouts: each call runs its responses to the end
    "async_whole": [*ASYNC, "async_training.partial_rollout=false"],
}


def figures(rows: list[dict]) -> dict[str, float]:
    """What the acceptance of #30 reads, from one run's metrics.jsonl rows."""
    timed = rows[1:]
    seconds = sum(r["timing_s/step"] for r in timed)
    scores = [r["critic/score/mean"] for r in rows]
    return {
        "samples_per_s": PROMPTS * N * len(timed) / seconds,
        "step_s": seconds / len(timed),
        "len_mean": sum(r["response_length/mean"] for r in rows) / len(rows),
        "len_max": sum(r["response_length/max"] for r in rows) / len(rows),
        "wait_s": sum(r.get("timing_s/gen", 0.0) for r in timed) / len(timed),
        "gain": sum(scores[-20:]) / 20 - sum(scores[:20]) / 20,
        "max_gap": max((r.get("fully_async/max_version_gap", 0.0) for r in rows), default=0.0),
    }


def run_one(name: str, extra: list[str], steps: int, out: Path) -> dict[str, float]:
    """``steps`` steps of the setting in ``name``'s layout: every layout trains on the same number of samples."""
    run_dir = out / name
    start = time.perf_counter()
    rows = run_main_ppo(name, run_dir, [f"trainer.total_steps={steps}", *SPLIT_1_1, *SETTING, *LAYOUTS[name], *extra])
    return {**figures(rows), "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layouts", default="sync,overlap,async", help=f"comma-separated, of {sorted(LAYOUTS)}")
    parser.add_argument("--steps", type=int, default=150, help="steps of the setting's batch per layout")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_long_tail"))
    parser.add_argument("extra", nargs="*", help="overrides added to every layout (e.g. trainer.seed=2)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    results = {}
    for name in args.layouts.split(","):
        results[name] = run_one(name, args.extra, args.steps, args.out)
    base = results.get("sync")
    logger.info(
        "%-12s %9s %7s %8s %7s %8s %7s %6s %7s %7s",
        "layout",
        "samples/s",
        "step_s",
        "len_mean",
        "len_max",
        "wait_s",
        "gain",
        "gap",
        "vs_sync",
        "wall_s",
    )
    for name, f in results.items():
        logger.info(
            "%-12s %9.1f %7.3f %8.1f %7.1f %8.3f %7.3f %6.0f %7s %7.0f",
            name,
            f["samples_per_s"],
            f["step_s"],
            f["len_mean"],
            f["len_max"],
            f["wait_s"],
            f["gain"],
            f["max_gap"],
            f"{f['samples_per_s'] / base['samples_per_s']:.2f}x" if base else "-",
            f["wall_s"],
        )


if __name__ == "__main__":
    main()
