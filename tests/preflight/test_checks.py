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
