"""The embedded default run (`make run`) learns its task and stays up: the curve a new user sees first.

A run is bitwise reproducible on one machine, not across CPUs: the float kernels torch picks for the CPU
round differently, and 150 RL steps carry that into where the curve ends. Seed 3 ends at 0.98 with every preset
and kind of machine measured; seeds 1 and 2 (0.90 and 0.87 on an AVX-512 EPYC, where the 2-epoch preset before gave 0.65
and 0.72) are bench figures (docs/TUNING.md, "The default run's preset"), not tests that could fail on
another CPU without the run getting worse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def assert_rises_and_stays_up(run_dir: Path, floor: float = 0.85, below_peak: float = 0.05) -> None:
    """The last 10 steps' mean score is at least ``floor`` and within ``below_peak`` of the best 10-step mean
    on the way (issue #34: a run that peaked and fell back fails, as does one that never got there)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    scores = [r["critic/score/mean"] for r in rows]
    means = [sum(scores[i - 10 : i]) / 10 for i in range(10, len(scores) + 1)]
    assert means[-1] >= floor and max(means) - means[-1] <= below_peak, (means[-1], max(means))


def test_default_run_rises_and_stays_up(tmp_path, shared_ray):
    cfg = load_config(
        [
            f"trainer.output_dir={tmp_path}",
            "trainer.progress_bar=false",
            f"trainer.ray.address={shared_ray}",
            "trainer.seed=3",
        ]
    )
    assert cfg.trainer.total_steps == 150 and cfg.resource_pool.pools["global_pool"]["GPU"] == 2  # make run's
    run(cfg)
    assert_rises_and_stays_up(tmp_path)
