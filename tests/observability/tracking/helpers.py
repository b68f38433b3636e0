"""Synthetic run directories shaped like the trainer's output."""

import json
import math


def synthetic_rows(steps: int = 10, kl_key: str = "actor/reward_kl_penalty") -> list[dict]:
    """Metric rows shaped like the trainer's (names from hybridrl.trainer), with made-up values."""
    rows = []
    for step in range(1, steps + 1):
        score = 0.1 + 0.05 * step
        gen = 0.2 + (0.5 if step == 1 else 0.0)
        row = {
            "step": step,
            "critic/score/mean": score,
            "critic/score/min": 0.0,
            "critic/score/max": 1.0,
            "actor/entropy": 2.0 - 0.1 * step,
            "actor/ppo_kl": 0.001 * step,
            kl_key: 0.01 * step,
            "response_length/mean": 5.0 + math.sin(step),
            "response_length/min": 2.0,
            "response_length/max": 8.0,
            "perf/throughput": 1000.0 + step,
            "perf/gen_tokens_per_s": 300.0,
            "timing_s/gen": gen,
            "timing_s/weight_sync": 0.05,
            "timing_s/generate_worker": 0.1,
            "timing_s/reward": 0.01,
            "timing_s/old_log_prob": 0.05,
            "timing_s/ref": 0.04,
            "timing_s/values": 0.04,
            "timing_s/adv": 0.01,
            "timing_s/update_critic": 0.2,
            "timing_s/update_actor": 0.3,
            "training/epoch": 0.0,
            "actor/pg_loss": -0.01 * step,
            "critic/vf_loss": 1.0 / step,
            "actor/grad_norm": 0.5,
            "critic/grad_norm": 0.2,
            "actor/pg_clipfrac": 0.05,
            "actor/lr": 1e-6 * min(1.0, step / 3),
        }
        if step % 5 == 0:  # validation every 5 steps, with a reward function's extra key
            row["val-core/openai/gsm8k/reward/mean@1"] = score
            row["val-core/openai/gsm8k/acc/mean@1"] = score / 2
        row["timing_s/step"] = (
            sum(
                v
                for k, v in row.items()
                if k.startswith("timing_s/") and k not in ("timing_s/weight_sync", "timing_s/generate_worker")
            )
            + 0.02
        )
        rows.append(row)
    return rows


def write_run(run_dir, rows, config="trainer:\n  experiment_name: <demo & test>\n", summary=None):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (run_dir / "config.yaml").write_text(config)
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))
    return run_dir
