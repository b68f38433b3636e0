"""verl's quickstart PPO command line runs as typed, apart from the model and data paths and smaller sizes:
with vllm, as verl's quickstart asks (where vLLM is installed: `make test` runs it in .venv-vllm), and
with the default hf engine."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from hybridrl.trainer.main_ppo import main
from tests.examples.gsm8k_fixture import fixture_parquet, tiny_llama

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.mark.parametrize(
    "engine",
    [
        "hf",
        pytest.param(
            "vllm",
            marks=[
                pytest.mark.vllm,
                pytest.mark.long,
                pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (.venv-vllm)"),
            ],
        ),
    ],
)
def test_verl_quickstart_command_line(tmp_path, engine):
    # vLLM's CPU attention takes heads of 32 dimensions and up
    model = tiny_llama(
        tmp_path / "llama", **({"hidden_size": 64, "num_attention_heads": 2} if engine == "vllm" else {})
    )
    train, test = fixture_parquet(tmp_path)  # 8 training prompts, 4 test prompts in verl's gsm8k format
    out = tmp_path / "run"
    code = main(
        [
            f"data.train_files={train}",
            f"data.val_files={test}",
            "data.train_batch_size=4",  # verl: 256
            "data.max_prompt_length=128",  # 512
            "data.max_response_length=8",  # 512
            f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.actor.optim.lr=1e-6",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",  # 64
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            f"actor_rollout_ref.rollout.name={engine}",  # verl: vllm
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
            "critic.optim.lr=1e-5",
            f"critic.model.path={model}",
            "critic.ppo_micro_batch_size_per_gpu=4",
            "algorithm.kl_ctrl.kl_coef=0.001",
            "trainer.logger=console",
            "trainer.val_before_train=False",
            "trainer.n_gpus_per_node=1",
            "trainer.nnodes=1",
            "trainer.save_freq=10",
            "trainer.test_freq=10",
            "trainer.total_epochs=2",  # 15
            f"trainer.output_dir={out}",  # the run directory (metrics, trace); verl has none
            f"trainer.default_local_dir={out}/ckpt",  # verl's checkpoint directory
            "trainer.ray.include_dashboard=false",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (out / "metrics.jsonl").exists()  # the run's record, whatever trainer.logger says (console here)
    placement = json.loads((out / "placement.json").read_text())
    assert [len(group["ranks"]) for group in placement.values()] == [1]  # n_gpus_per_node x nnodes workers
    # the one worker gets all of the local cluster's CPUs (the machine's cores) as torch threads
    assert next(iter(placement.values()))["ranks"][0]["torch_threads"] == os.cpu_count()
    step = out / "ckpt" / "global_step_4"  # 2 epochs x 8 prompts / 4 per step, in verl's layout
    assert (step / "actor").is_dir() and (step / "critic").is_dir()
    assert (out / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert summary["window"] >= 1
