"""parallel_config.megatron per role, the seed's spellings, and the checks made before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hybridrl.config.loader import ConfigError, load_config
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.preflight.checks import load_and_check


def test_seed_trainer_parallel_config_sets_the_critic():
    cfg = load_config(
        ["trainer.parallel_config.megatron.tp_size=2", "trainer.parallel_config.megatron.sequence_parallel=true"]
    )
    assert cfg.critic.strategy == "megatron"
    assert cfg.critic.parallel_config.megatron.tp_size == 2
    assert cfg.critic.parallel_config.megatron.sequence_parallel is True
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp"  # roles choose independently
    assert not hasattr(cfg.trainer, "parallel_config")


def test_seed_spelling_keeps_an_explicit_critic_strategy():
    with pytest.raises(ConfigError, match="takes only 'megatron'"):
        load_config(["trainer.parallel_config.deepspeed.stage=3"])
    cfg = load_config(["critic.strategy=fsdp", "trainer.parallel_config.megatron.tp_size=1"])
    assert cfg.critic.strategy == "fsdp"


def test_strategy_mapping_form_for_megatron():
    cfg = load_config(
        [
            "actor_rollout_ref.actor.strategy.name=megatron",
            "actor_rollout_ref.actor.strategy.params.tp_size=2",
            "actor_rollout_ref.actor.strategy.params.pp_schedule=GPipe",
        ]
    )
    megatron = cfg.actor_rollout_ref.actor.parallel_config.megatron
    assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    assert (megatron.tp_size, megatron.pp_schedule) == (2, "GPipe")


@pytest.mark.parametrize(
    "overrides,match",
    [
        # The built-in model has 4 attention heads, 2 key/value heads and 2 layers; the pool has 2 workers.
        (
            [
                "algorithm.adv_estimator=gae",  # a critic (the default run has none)
                "critic.strategy=megatron",
                "critic.parallel_config.megatron.tp_size=3",
                "resource_pool.pools.global_pool.GPU=3",
            ],
            r"tp_size=3 must divide the model's 4 attention heads and 2 key/value heads",
        ),
        (
            [
                "algorithm.adv_estimator=gae",  # a critic (the default run has none)
                "critic.strategy=megatron",
                "critic.parallel_config.megatron.pp_size=4",
                "resource_pool.pools.global_pool.GPU=4",
            ],
            r"pp_size=4 exceeds the model's 2 layers",
        ),
        (
            [
                "algorithm.adv_estimator=gae",  # a critic (the default run has none)
                "critic.strategy=megatron",
                "critic.parallel_config.megatron.tp_size=2",
                "critic.parallel_config.megatron.pp_size=2",
            ],
            r"2 x 2 = 4 must divide the role's 2 workers",
        ),
        (
            [
                "actor_rollout_ref.actor.strategy=megatron",
                "actor_rollout_ref.actor.parallel_config.megatron.pp_size=2",
                "actor_rollout_ref.actor.parallel_config.megatron.pp_microbatches=5",
            ],
            r"pp_microbatches \(5\) must divide the 64 sequences",
        ),
        (["actor_rollout_ref.actor.parallel_config.megatron.pp_schedule=zigzag"], r"choose one of: 1F1B, GPipe"),
    ],
)
def test_layouts_that_cannot_run_are_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_and_check(overrides)


def test_batch_arithmetic_counts_data_parallel_replicas():
    # 4 workers with tp=2 are 2 replicas: 16 x 4 / 2 = 32 sequences per replica per mini-batch.
    with pytest.raises(ConfigError, match=r"/ 2 workers = 32 sequences"):
        load_and_check(
            [
                "algorithm.adv_estimator=gae",
                "resource_pool.pools.global_pool.GPU=4",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
                "trainer.parallel_config.megatron.tp_size=2",
                "critic.ppo_micro_batch_size_per_gpu=24",
            ]
        )
    load_and_check(
        [
            "algorithm.adv_estimator=gae",
            "resource_pool.pools.global_pool.GPU=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
            "trainer.parallel_config.megatron.tp_size=2",
            "critic.ppo_micro_batch_size_per_gpu=32",
        ]
    )


def test_a_local_model_is_checked_from_its_config(tmp_path):
    path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=3,
        intermediate_size=32,
        seed=0,
    )
    with pytest.raises(ConfigError, match=r"6 attention heads and 3 key/value heads"):
        load_and_check(
            [
                f"actor_rollout_ref.model.path={path}",
                "actor_rollout_ref.actor.strategy=megatron",
                "actor_rollout_ref.actor.parallel_config.megatron.tp_size=2",
            ]
        )


def test_main_refuses_a_bad_layout_before_ray(tmp_path):
    """A layout that cannot run exits 2 with one message; no Ray is imported, no actor started."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hybridrl.trainer.main_ppo import main; code = main(sys.argv[1:]);"
            "print('RAY_LOADED', 'ray' in sys.modules); sys.exit(code)",
            "algorithm.adv_estimator=gae",
            "trainer.parallel_config.megatron.tp_size=3",
            "resource_pool.pools.global_pool.GPU=3",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "tp_size=3 must divide" in errors[0]
    assert "RAY_LOADED False" in proc.stdout


def test_a_model_without_a_tensor_parallel_plan_is_refused(tmp_path):
    from transformers import GPT2Config

    GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=17).save_pretrained(tmp_path / "gpt2")
    with pytest.raises(ConfigError, match=r"'gpt2' model declares no tensor-parallel plan"):
        load_and_check(
            [
                f"actor_rollout_ref.model.path={tmp_path / 'gpt2'}",
                "algorithm.adv_estimator=gae",  # a critic (the default run has none)
                "critic.strategy=megatron",
                "critic.parallel_config.megatron.tp_size=2",
            ]
        )
