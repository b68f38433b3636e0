"""End to end: a short PPO run on a local Ray cluster, as the main job runs it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.config.loader import load_config
from hybridrl.observability.tracking.breakdown import TOP_LEVEL_EXCLUDED, phase_breakdown
from hybridrl.observability.tracking.report import write_report
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_short_run_writes_metrics_changes_weights_and_exports(tmp_path):
    import ray

    out = tmp_path / "run"
    cfg = load_config(
        [
            f"trainer.output_dir={out}",
            "trainer.total_steps=3",
            "trainer.progress_bar=false",
            "algorithm.adv_estimator=gae",  # PPO with a critic, as the seed's trainer
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "critic.ppo_mini_batch_size=8",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "trainer.ray.object_store_memory=100000000",
        ]
    )
    result = run(cfg)
    assert not ray.is_initialized()  # the local cluster is gone

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert "timing_s/validation" in rows[-1] and "timing_s/checkpoint" in rows[-1]  # the last step does both
    for key in [
        "critic/score/mean",
        "actor/pg_loss",
        "actor/entropy",
        "actor/grad_norm",
        "critic/vf_loss",
        "timing_s/gen",
        "timing_s/update_actor",
        "timing_s/update_critic",
        "timing_s/step",
        "timing_s/weight_sync",
        "response_length/mean",
        "perf/throughput",
        "actor/reward_kl_penalty",
    ]:
        assert all(key in r for r in rows), key
    for r in rows:
        assert 0.0 <= r["critic/score/mean"] <= 1.0
        phases = sum(v for k, v in r.items() if k.startswith("timing_s/") and k not in TOP_LEVEL_EXCLUDED)
        # The phases run one after another inside the step: their sum never exceeds it (nothing counted
        # twice), and the breakdown shows the rest as "other". That rest is the driver's glue plus the
        # scheduler's delays: a few percent on an idle machine, 7% in one loaded CI run, so its size is a
        # bench's figure, not a test's (a 5% bound here failed under load).
        assert phases <= r["timing_s/step"]
        other = next(seconds for name, seconds, _ in phase_breakdown([r]) if name == "other")
        assert other == pytest.approx(r["timing_s/step"] - phases)
        assert r["timing_s/weight_sync"] + r["timing_s/generate_worker"] <= r["timing_s/gen"]
        assert 0 < r["perf/mfu"] < 1 and r["perf/flops_per_step"] > 0
        assert r["perf/actor_rollout+critic+ref/peak_vs_plan"] > 0  # the measured peak against hybridrl plan's
    assert (out / "config.yaml").exists() and json.loads((out / "summary.json").read_text())["window"] >= 1

    check_trace(out / "trace.json")
    report = write_report(out)
    html = report.read_text()
    assert html.count('<img src="data:image/png;base64,') >= 5 and "update_actor" in html
    assert (out / "breakdown.txt").read_text().count("%") >= 8
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))

    initial = load_file(out / "tiny_model" / "model.safetensors")
    trained = read_weights(out / "actor_hf")
    assert initial.keys() == trained.keys()
    assert any(not torch.equal(initial[k], trained[k]) for k in initial), "parameters did not change"
    model = AutoModelForCausalLM.from_pretrained(result["actor_hf"])
    assert model(torch.tensor([[4, 5, 6, 13]])).logits.shape[-1] == model.config.vocab_size


def check_trace(path):
    """The timeline is valid JSON with spans from every rank of every role, and the driver's phases."""
    events = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    spans = [e for e in events if e["ph"] == "X"]
    by_role: dict[str, set[int]] = {}
    for e in spans:
        if names[e["pid"]] != "driver":
            by_role.setdefault(e["name"].split(".")[0], set()).add(e["tid"])
    assert {"actor_rollout", "critic", "ref"} <= set(by_role)
    assert all(ranks == {0, 1} for role, ranks in by_role.items() if role in ("actor_rollout", "critic", "ref"))
    driver = {e["name"] for e in spans if names[e["pid"]] == "driver"}
    assert {"step", "gen", "update_actor", "update_critic"} <= driver
    assert any(e["name"] == "weight_sync" for e in spans)
