"""The embedded default run's learning curve over seeds, for candidate presets (issue #34): each candidate is
`make run` plus its overrides, one local run per seed, one after another on this machine.

    python bench/default_run.py                         # the shipped preset, seeds 1-3
    python bench/default_run.py --candidates grpo,ent  # named candidates below
    python bench/default_run.py --seeds 1,2 --out /tmp/sweep

Per run it prints what the acceptance of #34 reads: the mean score over the last 10 steps, the largest drop
below the running peak over the last 50 steps (of the 10-step moving mean, so one noisy batch of 128 samples
is not a "drop"), validation at the middle and at the last step, and the wall time.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from subprocess_run import run_main_ppo

logger = logging.getLogger("bench.default_run")

# Overrides over the shipped preset (an empty list is the preset itself). The preset is GRPO, 16 prompts x 8
# samples, mini-batch 8, 3 epochs (hybridrl/config/presets.py); "ep2" is the one before it and "gae" the one
# before that (GAE with a critic, 32 prompts x 4 samples, mini-batch 16), kept to compare against.
GAE = [
    "algorithm.adv_estimator=gae",
    "actor_rollout_ref.rollout.n=4",
    "data.train_batch_size=32",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
]
CANDIDATES: dict[str, list[str]] = {
    "shipped": [],
    "gae": GAE,
    "gae_mb8": [
        *GAE[:-1],
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "critic.ppo_micro_batch_size_per_gpu=16",
    ],
    "mb4": ["actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16"],
    "mb16": ["actor_rollout_ref.actor.ppo_mini_batch_size=16"],
    "ent": ["actor_rollout_ref.actor.entropy_coeff=0.01"],
    "lr2": ["actor_rollout_ref.actor.optim.lr=2e-3"],
    "ep4": ["actor_rollout_ref.actor.ppo_epochs=4"],
    "ep4_ch": ["actor_rollout_ref.actor.ppo_epochs=4", "actor_rollout_ref.actor.clip_ratio_high=0.28"],
    "ep2": ["actor_rollout_ref.actor.ppo_epochs=2"],
    # The preset's layout before 2026-12-07 (FSDP2 sharding the 0.1M-parameter model over the 2 workers).
    "full_shard": [
        "actor_rollout_ref.actor.fsdp.sharding_strategy=FULL_SHARD",
        "critic.fsdp.sharding_strategy=FULL_SHARD",
    ],
    "s200": ["trainer.total_steps=200"],
    "nokl": ["algorithm.use_kl_in_reward=false"],
    "kl_loss": [
        "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.01",
    ],
}


def curve_figures(rows: list[dict]) -> dict[str, float]:
    """The figures #34's acceptance reads, from one run's metrics.jsonl rows."""
    scores = [r["critic/score/mean"] for r in rows]
    smooth = [sum(scores[max(0, i - 9) : i + 1]) / len(scores[max(0, i - 9) : i + 1]) for i in range(len(scores))]
    tail = len(smooth) - 50
    drop = max(max(smooth[: i + 1]) - smooth[i] for i in range(max(tail, 0), len(smooth)))
    val = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("val-core/")]
    middle = min(val, key=lambda sv: abs(sv[0] - len(rows) / 2))[1] if val else float("nan")
    return {
        "last10": sum(scores[-10:]) / len(scores[-10:]),
        "peak": max(smooth),
        "peak_step": smooth.index(max(smooth)) + 1,
        "drop50": drop,
        "val_mid": middle,
        "val_last": val[-1][1] if val else float("nan"),
    }


def run_one(name: str, overrides: list[str], seed: int, out: Path) -> dict[str, float]:
    run_dir = out / f"{name}-seed{seed}"
    start = time.perf_counter()
    rows = run_main_ppo(f"{name} seed {seed}", run_dir, [f"trainer.seed={seed}", *overrides])
    return {**curve_figures(rows), "steps": len(rows), "wall_s": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", default="shipped", help=f"comma-separated, of {sorted(CANDIDATES)}")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--out", type=Path, default=Path("outputs/bench_default_run"))
    parser.add_argument("extra", nargs="*", help="overrides added to every candidate (e.g. trainer.total_steps=100)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    header = f"{'candidate':<10} {'seed':>4} {'last10':>7} {'peak':>6} {'@step':>6} {'drop50':>7} {'val_mid':>8} {'val_last':>8} {'wall_s':>7}"
    logger.info(header)
    for name in args.candidates.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            f = run_one(name, [*CANDIDATES[name], *args.extra], seed, args.out)
            logger.info(
                "%-10s %4d %7.3f %6.3f %6d %7.3f %8.3f %8.3f %7.0f",
                name,
                seed,
                f["last10"],
                f["peak"],
                f["peak_step"],
                f["drop50"],
                f["val_mid"],
                f["val_last"],
                f["wall_s"],
            )


if __name__ == "__main__":
    main()
