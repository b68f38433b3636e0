"""The run's closing line tells a run that peaked and fell back from one that ended at its best (issue #34)."""

from __future__ import annotations

import pytest

from hybridrl.trainer.job import learning_summary
from hybridrl.trainer.main_ppo import closing_line


def _history(scores: list[float]) -> list[dict[str, float]]:
    return [{"critic/score/mean": s} for s in scores]


def test_a_run_that_fell_back_says_how_far_below_its_peak_it_ended():
    s = learning_summary(_history([0.1, 0.1, 0.5, 0.9, 0.9, 0.6, 0.6]), window=2)
    assert (s["first_mean"], s["peak_mean"], s["peak_step"], s["last_mean"]) == pytest.approx((0.1, 0.9, 5, 0.6))
    line = closing_line({**s, "wall_s": 12.0}, "/runs/a")
    assert "peaked at 0.900 (step 5), 0.600 last" in line and "ended 0.300 below its peak" in line
    assert line.endswith("Report: hybridrl report /runs/a")


def test_a_run_that_ended_at_its_best_says_so():
    s = learning_summary(_history([0.1, 0.2, 0.4, 0.8, 0.9]), window=2)
    assert s["peak_step"] == 5 and s["gain"] == pytest.approx(0.85 - 0.15)
    assert "the reward rose, and ended near its peak" in closing_line({**s, "wall_s": 1.0}, "/runs/b")
