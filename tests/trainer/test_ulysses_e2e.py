"""The default run with Ulysses sequence parallelism (verl's key, 2 workers splitting every sequence) computes what
the same run without it computes: every learning metric of 10 steps, validation included, within 1e-4.

Both runs train on one mini-batch per step. With the preset's two, the runs would differ by their data-parallel
layout, not by Ulysses: without it the 2 workers are 2 replicas, and a mini-batch is half of each replica's rows
(verl's rule too), which is a different half of the step's rows than one replica's first half."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from hybridrl.config.loader import load_config
from hybridrl.observability.metrics import machine_metric
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: A metric of the data-parallel layout (1 replica against 2), not of the computation.
LAYOUT = "dp_token_imbalance"


def learning_metrics(run_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in row.items() if isinstance(v, int | float) and not machine_metric(k) and LAYOUT not in k}
        for row in rows
    ]


def test_default_run_with_ulysses_matches_the_run_without(tmp_path, shared_ray):
    def metrics(name: str, sp: int) -> list[dict[str, float]]:
        out = tmp_path / name
        cfg = load_config(
            [
                f"trainer.output_dir={out}",
                "trainer.progress_bar=false",
                f"trainer.ray.address={shared_ray}",
                "trainer.total_steps=10",
                "trainer.test_freq=5",
                "actor_rollout_ref.model.use_remove_padding=true",
                f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}",
                "actor_rollout_ref.actor.ppo_mini_batch_size=${data.train_batch_size}",
                "actor_rollout_ref.actor.ppo_epochs=2",  # the comparison's shape; a third epoch only adds time
            ]
        )
        run(cfg)
        return learning_metrics(out)

    plain, split = metrics("plain", 1), metrics("ulysses", 2)
    assert len(plain) == len(split) == 10
    assert any("val-core" in k for k in plain[4]), "validation ran at step 5"
    compared = 0
    for step, (want, got) in enumerate(zip(plain, split, strict=True), start=1):
        assert want.keys() == got.keys(), (step, want.keys() ^ got.keys())
        for key in want:
            compared += 1
            assert math.isclose(got[key], want[key], rel_tol=1e-4, abs_tol=1e-6), (step, key, want[key], got[key])
    assert compared > 300
