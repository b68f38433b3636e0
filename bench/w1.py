"""Benchmark W1: hybridrl's GRPO and PPO step time on the throughput issue's workload, before and after a
change, in one run. A figure, not a test.

    .venv/bin/python bench/w1.py [--baseline-src DIR] [--steps 12] [--layouts 2,1]
        [--trl-grpo /path/to/trl-1.16-venv/bin/python] [--trl-ppo /path/to/trl-1.12-venv/bin/python]

W1: a Qwen2-shaped model of hidden 256, 4 layers, 4 heads, 2 KV heads, FFN 1024 (the built-in tiny model
at those sizes), the built-in copy task with 16 digits (17-token prompts), 16 prompts x 4 samples, 16
response tokens, AdamW lr 1e-5, fp32, one PPO epoch, one mini-batch, 12 steps; the median step time
over steps 3-12; the whole machine's cores. GRPO as TRL's GRPOTrainer runs it by default (no reference
model, no KL); PPO as TRL's PPOTrainer (a critic, a reference model and the KL penalty in the reward).

Layouts: ``2`` = one pool of two workers (every role on both), ``1`` = one worker, ``1+1`` = one training
worker and one generation worker of its own (``resource_pool.mapping.rollout``), each step generating then
training, ``1+1o`` = the same with generation overlapped with training (``rollout.overlap``, one step
off-policy; the issue's goal: at least 1.3x the throughput of ``1+1``). ``--baseline-src DIR``
(``git worktree add DIR REV``) runs the same workloads on that revision's code too, so "before" and
"after" come from one run on the same machine. Printed per workload and source: median s/step,
generated tokens/s, the median of each phase, the actor workers' CPU utilisation during the update and
their peak memory. Each run is a process of its own (``python -m hybridrl.trainer.main_ppo``).

``--trl-grpo`` / ``--trl-ppo``: the Python of a virtualenv with TRL 1.16 (GRPOTrainer) / TRL 1.12
(PPOTrainer) installed (never a dependency of hybridrl); ``bench/peers/`` runs W1 there on the same model
and prompts, and the table adds their median step time (see each script for what differs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from hybridrl.observability.tracking.breakdown import PHASE_ORDER

logger = logging.getLogger("bench.w1")
REPO = Path(__file__).resolve().parents[1]

W1 = [
    "actor_rollout_ref.model.tiny.hidden_size=256",
    "actor_rollout_ref.model.tiny.num_hidden_layers=4",
    "actor_rollout_ref.model.tiny.num_attention_heads=4",
    "actor_rollout_ref.model.tiny.num_key_value_heads=2",
    "actor_rollout_ref.model.tiny.intermediate_size=1024",
    "data.task=copy",
    "data.task_kwargs.num_digits=16",
    "data.max_prompt_length=17",
    "data.max_response_length=16",
    "data.train_batch_size=16",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.optim.lr=1e-5",
    "critic.optim.lr=1e-5",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "critic.ppo_micro_batch_size_per_gpu=32",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.save_hf=false",
    "trainer.progress_bar=false",
    "trainer.logger=[jsonl]",
    "trainer.resume_mode=disable",
    "trainer.ray.include_dashboard=false",
]
ALGORITHMS = {
    "grpo": [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "actor_rollout_ref.actor.use_kl_loss=false",
    ],
    "ppo": ["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.kl_coef=0.05"],
}
PHASES = [p for p in PHASE_ORDER if p not in ("data", "gen_max")]  # the step's phases on W1


def layout_overrides(layout: str) -> list[str]:
    """``2``, ``1``: one pool of that many workers; ``1+1``: a training and a generation worker; ``1+1o``:
    the same, overlapped."""
    if "+" not in layout:
        return [f"resource_pool.pools.global_pool.GPU={int(layout)}"]
    train, gen = layout.rstrip("o").split("+")
    return [
        f"resource_pool.pools.global_pool.GPU={int(train)}",
        f"+resource_pool.pools.rollout_pool.GPU={int(gen)}",
        "+resource_pool.mapping.rollout=rollout_pool",
        f"actor_rollout_ref.rollout.overlap={str(layout.endswith('o')).lower()}",
    ]


def run_one(src: Path, algorithm: str, layout: str, steps: int, out: Path) -> dict[str, float]:
    """One run of W1 on the code under ``src``; medians over steps 3..steps."""
    overrides = [
        *W1,
        *ALGORITHMS[algorithm],
        *layout_overrides(layout),
        f"trainer.total_steps={steps}",
        f"trainer.output_dir={out}",
    ]
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run(
        [sys.executable, "-m", "hybridrl.trainer.main_ppo", *overrides],
        check=True,
        cwd=src,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][2:]

    def median(key: str) -> float:
        values = [row[key] for row in rows if key in row]
        return statistics.median(values) if values else float("nan")

    group = next(k.split("/")[1] for k in rows[0] if k.startswith("perf/") and k.endswith("/cpu_util_pct"))
    figures = {
        "step_s": median("timing_s/step"),
        # Overlapped, ``gen`` is only the wait for a prefetched generation: count the workers' own time.
        "gen_tokens_per_s": statistics.median(r["perf/gen_tokens_per_s"] * r["timing_s/step"] for r in rows)
        / median("timing_s/generate_worker" if layout.endswith("o") else "timing_s/gen"),
        "cpu_util_pct": median(f"perf/{group}/cpu_util_pct"),
        "peak_rss_gb": max(r.get(f"perf/{group}/peak_rss_gb", 0.0) for r in rows),
    }
    figures.update({phase: median(f"timing_s/{phase}") for phase in PHASES})
    return figures


def run_peer(python: str, script: str, model: str, prompts: Path, steps: int, out: Path) -> dict[str, float]:
    env = {**os.environ, "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONPATH": ""}
    subprocess.run(
        [
            python,
            str(REPO / "bench" / "peers" / script),
            "--model",
            model,
            "--prompts",
            str(prompts),
            "--out",
            str(out),
            "--steps",
            str(steps),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return {"step_s": statistics.median(json.loads(out.read_text())["step_s"][2:])}


def write_peer_inputs(tmp: Path, steps: int) -> tuple[str, Path]:
    """W1's model (the tiny model at W1's sizes: the weights hybridrl's run builds) and copy-task prompts."""
    from hybridrl.data.tasks import make_task
    from hybridrl.models.tiny import ensure_tiny_model

    sizes = {o.split("=")[0].rsplit(".", 1)[1]: int(o.split("=")[1]) for o in W1 if ".tiny." in o}
    model = ensure_tiny_model(tmp / "w1-model", **sizes, seed=0)
    examples = make_task("copy", num_digits=16).examples(64 * steps, seed=1)
    prompts = tmp / "w1-prompts.json"
    prompts.write_text(json.dumps([{"prompt": e.prompt, "ground_truth": e.ground_truth} for e in examples]))
    return model, prompts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline-src", type=Path, help="a checkout of the revision to compare against")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--layouts", default="2,1,1+1,1+1o", help="comma-separated: 2, 1, 1+1, 1+1o (see above)")
    parser.add_argument("--algorithms", default="grpo,ppo")
    parser.add_argument("--trl-grpo", help="python of a virtualenv with trl 1.16")
    parser.add_argument("--trl-ppo", help="python of a virtualenv with trl 1.12")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    sources = [("after", REPO)] + ([("before", args.baseline_src.resolve())] if args.baseline_src else [])
    results: dict[tuple[str, str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        peers = {"grpo": (args.trl_grpo, "trl_grpo_w1.py"), "ppo": (args.trl_ppo, "trl_ppo_w1.py")}
        if args.trl_grpo or args.trl_ppo:
            model, prompts = write_peer_inputs(Path(tmp), args.steps)
        for algorithm in args.algorithms.split(","):
            python, script = peers[algorithm]
            if python:
                peer = run_peer(python, script, model, prompts, args.steps, Path(tmp) / f"{algorithm}-trl.json")
                results[(algorithm, "1", "trl")] = peer
                logger.info("%s, TRL: %.3f s/step", algorithm, peer["step_s"])
            for layout in args.layouts.split(","):
                for label, src in sources:
                    if label == "before" and "+" in layout:
                        continue  # a rollout pool of its own is new
                    out = Path(tmp) / f"{algorithm}-{layout}-{label}"
                    results[(algorithm, layout, label)] = run_one(src, algorithm, layout, args.steps, out)
                    logger.info(
                        "%s, layout %s, %s: %.3f s/step",
                        algorithm,
                        layout,
                        label,
                        results[(algorithm, layout, label)]["step_s"],
                    )
    header = f"{'workload':<16}{'code':<8}{'s/step':>8}{'gen tok/s':>10}{'cpu %':>7}{'peak GB':>8}  " + " ".join(
        f"{p:>8}" for p in PHASES
    )
    logger.info("\nW1, medians over steps 3-%d (phase columns: seconds)\n%s", args.steps, header)
    for (algorithm, layout, label), f in results.items():
        if label == "trl":
            logger.info("%-16s%-8s%8.3f", f"{algorithm} 1 process", "TRL", f["step_s"])
            continue
        phases = " ".join(f"{f[p]:8.3f}" if f[p] == f[p] else f"{'-':>8}" for p in PHASES)
        logger.info(
            "%-16s%-8s%8.3f%10.0f%7.0f%8.2f  %s",
            f"{algorithm} {layout}",
            label,
            f["step_s"],
            f["gen_tokens_per_s"],
            f["cpu_util_pct"],
            f["peak_rss_gb"],
            phases,
        )
        notes = []
        if label == "after" and (algorithm, layout, "before") in results:
            notes.append(f"{results[(algorithm, layout, 'before')]['step_s'] / f['step_s']:.2f}x faster than before")
        if label == "after" and (algorithm, "1", "trl") in results:
            notes.append(f"{f['step_s'] / results[(algorithm, '1', 'trl')]['step_s']:.2f}x TRL's step time")
        if layout.endswith("o") and (algorithm, layout[:-1], label) in results:
            sequential = results[(algorithm, layout[:-1], label)]["step_s"]
            notes.append(f"{sequential / f['step_s']:.2f}x the throughput of {layout[:-1]} (sequential)")
        if notes:
            logger.info("%-24s%s", "", "; ".join(notes))


if __name__ == "__main__":
    main()
