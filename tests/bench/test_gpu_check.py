"""The GPU check (bench/gpu/check.sh) runs where a GPU is lent for minutes, never in CI: its training and
generation benches run here on the CPU with tiny shapes, so that a change of the roles' or engines' API
breaks this test and not the next GPU session's one chance to measure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu"


def _run(script: str, args: list[str], out: Path) -> dict:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_training_bench_times_the_plain_loop_and_the_projects_paths(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--shape", "tiny", "--prompts", "2", "--n", "2", "--prompt-min", "16"]
    args += ["--prompt-max", "32", "--resp-min", "4", "--resp-max", "16", "--micro", "2", "--max-tokens", "96"]
    args += ["--warmup", "0", "--iters", "1", "--min-path-s", "0", "--paths", "d,b,c"]
    paths = _run("train_bench.py", args, tmp_path / "train.json")["paths"]
    assert set(paths) == {"d", "b", "c"}
    for name, figures in paths.items():
        assert "median_s" in figures, (name, figures.get("error"), figures.get("traceback"))
    assert paths["b"]["engine"]["attn_implementation"] == "hybridrl_packed"
    # the model's own run, not the built-in tiny run's preset (which replicates instead of sharding)
    assert "actor_rollout_ref.model.path=" in paths["b"]["overrides"][0]


def test_the_generation_bench_times_the_hf_engine_and_plain_generate(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--shape", "tiny", "--prompts", "4", "--n", "2", "--prompt-min", "8"]
    args += ["--prompt-max", "24", "--new-tokens", "4", "--repeats", "1", "--budget-s", "120"]
    scenarios = _run("gen_bench.py", args, tmp_path / "gen.json")["scenarios"]
    for name, figures in scenarios.items():
        for engine in ("hybridrl_hf_engine", "plain_generate"):
            assert "tokens_per_s" in figures[engine], (name, engine, figures[engine])
