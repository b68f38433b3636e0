"""One training run in a subprocess of its own, as ``make run`` starts it: the bench scripts' way to run
candidates one after another on this machine (each with its own local Ray cluster, nothing shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_main_ppo(name: str, run_dir: Path, overrides: list[str]) -> list[dict]:
    """``hybridrl.trainer.main_ppo`` with ``overrides`` into ``run_dir``; its metrics.jsonl rows. A failed run
    stops the bench with the run's own one-line error, not just an exit code."""
    cmd = [
        sys.executable,
        "-m",
        "hybridrl.trainer.main_ppo",
        f"trainer.output_dir={run_dir}",
        "trainer.progress_bar=false",
        "trainer.logger=[jsonl]",
        "trainer.ray.include_dashboard=false",
        *overrides,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if " ERROR " in line] or done.stderr.splitlines()[-1:]
        raise SystemExit(f"{name} failed (exit {done.returncode}): {errors[-1] if errors else ''}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
