"""Exact resume: stop after step k, resume, and end bitwise-identical to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
import torch
from transformers import AutoModelForCausalLM

from hybridrl.checkpoint.dcp_io import read_full
from hybridrl.checkpoint.hf_files import read_weights
from hybridrl.checkpoint.manager import role_dir
from hybridrl.cli import main as cli_main
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run
from hybridrl.trainer.ppo_trainer import PPOTrainer

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.progress_bar=false",
    "algorithm.adv_estimator=gae",  # a critic, whose weights, optimizer and warm-up resume too
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "critic.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "critic.ppo_micro_batch_size_per_gpu=8",
    "trainer.save_freq=2",
    "trainer.ray.object_store_memory=100000000",
    "trainer.ray.include_dashboard=false",
    "trainer.logger=[jsonl]",
    "actor_rollout_ref.actor.shuffle=true",
    # Schedules whose state must survive a resume: the actor waits for the critic, warms up, then decays.
    "trainer.critic_warmup=2",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
    "actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
    "actor_rollout_ref.actor.optim.total_training_steps=4",
    "critic.optim.lr_warmup_steps_ratio=0.5",
    "critic.optim.total_training_steps=4",
]


def training_metrics(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    # Timings differ run to run; the shorter run also validates at its last step (val-*).
    skip = ("timing_s/", "perf/", "ray/", "val-", "train/restarts")
    return [{k: v for k, v in r.items() if not k.startswith(skip)} for r in rows]


def same_checkpoints(a, b, step=4):
    for role in ("actor_rollout", "critic"):  # critic weights and both optimizers, every tensor in full
        sa = read_full(role_dir(a / "checkpoints" / f"global_step_{step}", role))
        sb = read_full(role_dir(b / "checkpoints" / f"global_step_{step}", role))
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa), role


@pytest.fixture(scope="module")
def full(tmp_path_factory, shared_ray_cluster):
    """An uninterrupted 4-step run."""
    out = tmp_path_factory.mktemp("resume") / "full"
    address = shared_ray_cluster.address()
    run(load_config(SMALL + [f"trainer.ray.address={address}", f"trainer.output_dir={out}", "trainer.total_steps=4"]))
    return out


def test_schedules_follow_verl(full):
    rows = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    lr = 1e-3  # the default optim.lr of both roles
    assert "actor/lr" not in rows[0]  # critic_warmup=2: the actor first learns at step 2
    assert [r["actor/lr"] for r in rows[1:]] == pytest.approx([0.0, lr / 2, lr])  # 2 warm-up steps, then cosine
    assert [r["critic/lr"] for r in rows] == pytest.approx([0.0, lr / 2, lr, lr])  # 0.5 x 4 warm-up steps


def test_stop_resume_matches_uninterrupted_run(full, tmp_path, shared_ray):
    split = tmp_path / "split"
    run(
        load_config(
            SMALL + [f"trainer.ray.address={shared_ray}", f"trainer.output_dir={split}", "trainer.total_steps=2"]
        )
    )
    assert (split / "checkpoints" / "global_step_2").exists()
    result = run(
        load_config(
            SMALL + [f"trainer.ray.address={shared_ray}", f"trainer.output_dir={split}", "trainer.total_steps=4"]
        )
    )
    assert len(result["history"]) == 4  # steps 1-2 read back from metrics.jsonl, 3-4 trained
    # The run's records span both legs: the summary's wall time goes on from the checkpoint's, the
    # timeline file holds both legs, each marked.
    before = json.loads((split / "checkpoints" / "global_step_2" / "trainer_state.json").read_text())["run"]
    assert before["legs"] == [0] and result["summary"]["legs"] == [0, 2]
    assert result["summary"]["wall_s"] > before["wall_s"] > 0
    marks = [e["name"] for e in json.loads((split / "trace.json").read_text()) if e["ph"] == "i"]
    assert marks == ["leg 1: start", "leg 2: resumed after step 2"]

    assert training_metrics(full / "metrics.jsonl") == training_metrics(split / "metrics.jsonl")
    a, b = read_weights(full / "actor_hf"), read_weights(split / "actor_hf")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    same_checkpoints(full, split)

    # Export the final checkpoint: same logits as the actor saved at the end of the run.
    out = tmp_path / "exported"
    assert cli_main(["export", str(full / "checkpoints" / "global_step_4"), str(out)]) == 0
    for exported in (out, full / "actor_hf"):  # generation settings as published, not the trainer's
        assert json.loads((exported / "config.json").read_text())["use_cache"] is True
    ids = torch.tensor([[4, 5, 6, 13, 7]])
    exported = AutoModelForCausalLM.from_pretrained(out)(ids).logits
    final = AutoModelForCausalLM.from_pretrained(full / "actor_hf")(ids).logits
    torch.testing.assert_close(exported, final, rtol=0, atol=0)
    assert cli_main(["export", str(tmp_path / "nope"), str(out)]) == 2


def test_a_killed_worker_is_recovered_in_the_same_run(full, tmp_path, monkeypatch, shared_ray):
    """SIGKILL of a worker at the start of step 3: the driver restarts the groups from step 2's checkpoint and
    ends exactly where the uninterrupted run ends."""
    killed = []
    original = PPOTrainer.step

    def step_with_a_kill(self, step, **kwargs):
        if step == 3 and not killed:
            killed.append(self.roles.groups()[0].node_info[1]["pid"])
            os.kill(killed[0], signal.SIGKILL)
        return original(self, step, **kwargs)

    monkeypatch.setattr(PPOTrainer, "step", step_with_a_kill)
    out = tmp_path / "recovered"
    result = run(
        load_config(SMALL + [f"trainer.ray.address={shared_ray}", f"trainer.output_dir={out}", "trainer.total_steps=4"])
    )
    assert killed and not psutil.pid_exists(killed[0])
    assert result["summary"]["restarts"] == 1 and result["summary"]["legs"] == [0, 2]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/restarts"] for r in rows] == [0, 0, 1, 1]  # steps 3-4 re-run after the recovery
    assert training_metrics(full / "metrics.jsonl") == training_metrics(out / "metrics.jsonl")
    same_checkpoints(full, out)
