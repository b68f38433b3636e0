"""Pre-flight answers every problem at once, and takes verl's batch-size rules."""

from __future__ import annotations

import pytest

from hybridrl.config.errors import ConfigError
from hybridrl.preflight.checks import load_and_check

BATCH = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.n=2",
]


def test_dynamic_batch_sizes_ignore_the_micro_batch_size_as_verl_does():
    micro = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"  # divides nothing: refused without dynamic bsz
    with pytest.raises(ConfigError, match=r"ppo_micro_batch_size_per_gpu \(3\) must divide"):
        load_and_check([*BATCH, micro])
    load_and_check([*BATCH, micro, "actor_rollout_ref.actor.use_dynamic_bsz=true"])


def test_problems_of_different_checks_come_in_one_error():
    with pytest.raises(ConfigError) as info:
        load_and_check(
            [
                *BATCH,
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
                "actor_rollout_ref.rollout.n=1",  # grpo needs groups
            ]
        )
    message = str(info.value)
    assert message.startswith("2 config problems"), message
    assert "rollout.n (1) must be at least 2" in message and "ppo_micro_batch_size_per_gpu (3)" in message


def test_dapo_generation_batch_needs_the_filter():
    with pytest.raises(ConfigError, match=r"data.gen_batch_size=24 sizes DAPO's generation rounds"):
        load_and_check([*BATCH, "data.gen_batch_size=24"])
    load_and_check([*BATCH, "data.gen_batch_size=24", "algorithm.filter_groups.enable=true"])
    load_and_check([*BATCH, "data.gen_batch_size=8"])  # verl's scripts that set it to train_batch_size


ULYSSES = [*BATCH, "actor_rollout_ref.model.use_remove_padding=true", "resource_pool.pools.global_pool.GPU=4"]


def test_ulysses_groups_must_divide_the_workers_and_the_heads():
    with pytest.raises(ConfigError, match=r"ulysses_sequence_parallel_size=3 must divide the role's 4 workers"):
        load_and_check([*ULYSSES, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3"])


def test_ulysses_needs_packed_rows_and_the_fsdp_engine():
    with pytest.raises(ConfigError) as info:
        load_and_check(
            [
                *BATCH,
                "critic.ulysses_sequence_parallel_size=2",
                "critic.strategy=megatron",
                "algorithm.adv_estimator=gae",
            ]
        )
    message = str(info.value)
    assert "needs critic.strategy=fsdp" in message and "set critic.model.use_remove_padding=true" in message


def test_ulysses_groups_are_one_replica_and_budgets_are_per_rank():
    # 1 prompt x 2 samples per mini-batch: 2 sequences, which 2 replicas of 2 ranks can split and 4 ranks cannot
    small = [*ULYSSES, "actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.actor.use_dynamic_bsz=true"]
    sp2 = "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"
    with pytest.raises(ConfigError, match="ppo_mini_batch_size"):
        load_and_check(small)
    cfg = load_and_check([*small, sp2])
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    half = f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={-(-longest // 2)}"
    load_and_check([*small, sp2, half])
    with pytest.raises(ConfigError, match="shorter than the longest sequence"):
        load_and_check([*small, sp2, half.replace(f"={-(-longest // 2)}", f"={longest // 2 - 1}")])
