"""Single values out of range: each section checks its own (``problems(at)``), and a launch hears of them all at
once, each under the path of the section it was read from."""

from __future__ import annotations

import dataclasses

import pytest

from hybridrl.config.choices import Strategy
from hybridrl.config.loader import ConfigError, load_config
from hybridrl.config.schema import OptimConfig
from hybridrl.preflight.checks import check


def test_the_loaded_defaults_have_no_problem():
    assert load_config().problems() == []


def test_bad_values_in_different_sections_come_in_one_error():
    with pytest.raises(ConfigError) as info:
        load_config(["data.train_batch_size=0", "critic.optim.betas=[2,0]"])
    lines = str(info.value).splitlines()
    assert lines[0].startswith("2 config problems"), lines
    assert lines[1:] == [
        "  - data.train_batch_size=0 must be positive.",
        "  - critic.optim.betas=[2.0, 0.0] must be two numbers in [0, 1), e.g. [0.9, 0.999].",
    ]


def test_one_problem_is_its_own_line():
    with pytest.raises(ConfigError) as info:
        load_config(["trainer.save_freq=0"])
    assert str(info.value) == "trainer.save_freq=0: use a positive number of steps, or -1 for no checkpoints."


def test_a_reused_section_reports_the_path_it_was_read_from():
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.actor.optim.eps=-1"])
    assert str(info.value).startswith("actor_rollout_ref.actor.optim.eps=-1.0 and actor_rollout_ref.actor.optim.")
    assert "critic" not in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(["critic.optim.eps=-1"])
    assert str(info.value).startswith("critic.optim.eps=-1.0 and critic.optim.weight_decay=")
    assert OptimConfig(num_cycles=0).problems("x.optim") == [
        "x.optim.num_cycles=0 must be positive (0.5 = one cosine decay)."
    ]


def test_a_check_across_sections_sits_on_their_parent():
    """LoRA (a model key) against the actor's engine; the reward model's buffer against data's response length."""
    cfg = load_config()
    arr = cfg.actor_rollout_ref
    megatron_lora = dataclasses.replace(
        arr,
        model=dataclasses.replace(arr.model, lora_rank=8),
        actor=dataclasses.replace(arr.actor, strategy=Strategy.megatron),
    )
    assert arr.model.problems("m") == [] and megatron_lora.model.problems("m") == []
    assert any("with actor.strategy=megatron" in p for p in megatron_lora.problems("actor_rollout_ref"))
    buffer = dataclasses.replace(cfg.reward_model.overlong_buffer, enable=True, len=7)
    dapo = dataclasses.replace(cfg.reward_model, reward_manager="dapo", overlong_buffer=buffer)
    assert dapo.problems("reward_model") == []
    assert dataclasses.replace(cfg, reward_model=dapo).problems() == [
        "reward_model.overlong_buffer.len=7 must lie in (0, data.max_response_length=6] when overlong_buffer.enable=true."
    ]


def test_a_value_the_critic_takes_from_the_actor_is_reported_once():
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.actor.ppo_epochs=0"])  # the critic's follows it
    assert str(info.value) == "actor_rollout_ref.actor.ppo_epochs=0 must be positive."
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.actor.ppo_epochs=0", "critic.ppo_epochs=-1"])
    assert "critic.ppo_epochs=-1 must be positive." in str(info.value)


def test_a_tiny_model_with_no_heads_is_one_problem_not_a_crash():
    with pytest.raises(ConfigError) as info:
        load_config(["actor_rollout_ref.model.tiny.num_attention_heads=0"])
    assert str(info.value) == "actor_rollout_ref.model.tiny.num_attention_heads=0 must be >= 1."


def test_preflight_reports_the_ranges_of_a_config_made_without_the_loader():
    cfg = load_config()
    bad = dataclasses.replace(cfg, trainer=dataclasses.replace(cfg.trainer, test_freq=0, max_restarts=-1))
    with pytest.raises(ConfigError) as info:
        check(bad)
    message = str(info.value)
    assert message.startswith("2 config problems"), message
    assert "trainer.max_restarts=-1 must be >= 0." in message and "trainer.test_freq=0: use a positive" in message
