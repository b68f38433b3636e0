"""Benchmark: a fixed small PPO workload on a local Ray cluster; prints step time, generated tokens
per second and the phase breakdown (seconds and % of step). A figure, not a test.

    .venv/bin/python bench/ppo_step.py [--steps 20] [--warmup 3] [key=value ...]
"""

from __future__ import annotations

import argparse
import tempfile

from hybridrl.logging_utils import setup_logging
from hybridrl.preflight.checks import load_and_check
from hybridrl.trainer.job import run

PHASES = ["gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor"]
WORKER_PHASES = ["weight_sync", "generate_worker"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out of the averages")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    setup_logging()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_and_check(
            [
                f"trainer.total_steps={args.steps}",
                "trainer.progress_bar=false",
                "trainer.logger=[jsonl]",
                "trainer.save_hf=false",
                f"trainer.output_dir={out}",
                *args.overrides,
            ]
        )
        history = run(cfg)["history"][args.warmup :]
    if not history:
        raise SystemExit(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")

    def mean(key: str) -> float:
        return sum(m.get(key, 0.0) for m in history) / len(history)

    step = mean("timing_s/step")
    gen_tokens = sum(m["perf/gen_tokens_per_s"] * m["timing_s/step"] for m in history) / len(history)
    sequences = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n
    print(
        f"\nworkload: {sequences} sequences/step ({cfg.data.train_batch_size} prompts x "
        f"{cfg.actor_rollout_ref.rollout.n}), max {cfg.data.max_response_length} new tokens, "
        f"{len(history)} measured steps after {args.warmup} warm-up"
    )
    print(f"step time            {step:8.3f} s")
    print(
        f"generated tokens/s   {gen_tokens / step:8.0f}  (per step time)   "
        f"{gen_tokens / mean('timing_s/gen'):8.0f}  (per generation time)"
    )
    print(f"throughput           {mean('perf/throughput'):8.0f}  tokens/s per worker (prompt + response)")
    print(f"\n{'phase':<20}{'seconds':>10}{'% of step':>12}")
    for phase in PHASES:
        seconds = mean(f"timing_s/{phase}")
        print(f"{phase:<20}{seconds:>10.3f}{100 * seconds / step:>11.1f}%")
    other = step - sum(mean(f"timing_s/{p}") for p in PHASES)
    print(f"{'driver/other':<20}{other:>10.3f}{100 * other / step:>11.1f}%")
    print(f"{'step':<20}{step:>10.3f}{100.0:>11.1f}%")
    print("\ninside gen, on the slowest worker:")
    for phase in WORKER_PHASES:
        print(f"  {phase:<18}{mean(f'timing_s/{phase}'):>10.3f}")


if __name__ == "__main__":
    main()
