"""The typed schema is the one home of every key: the shipped YAML is rendered from it, every field is
documented, closed sets are enums, and the loaded config is the frozen dataclass tree."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from importlib import resources

import pytest
from omegaconf import OmegaConf

from hybridrl.config.choices import Choice, PipelineSchedule, Precision, ShardingStrategy, Strategy
from hybridrl.config.loader import ConfigError, load_config, to_yaml
from hybridrl.config.render import render_defaults
from hybridrl.config.schema import ActorConfig, Config, FSDPConfig

# Keys whose value is a user's mapping (their inner keys are the user's, not the schema's).
USER_DICTS = {"data.task_kwargs", "resource_pool.pools", "resource_pool.mapping", "trainer.ray.env_vars"}


def leaf_keys(cls: type, prefix: str = "") -> Iterator[str]:
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        default = getattr(cls(), f.name)
        if dataclasses.is_dataclass(default):
            yield from leaf_keys(type(default), path + ".")
        else:
            yield path


def test_shipped_yaml_is_rendered_from_the_schema():
    shipped = resources.files("hybridrl.config").joinpath("ppo_trainer.yaml").read_text()
    assert shipped == render_defaults(), (
        "hybridrl/config/ppo_trainer.yaml differs from the schema: "
        "python -m hybridrl.config.render > hybridrl/config/ppo_trainer.yaml"
    )


def test_the_rendered_yaml_loads_back_to_the_defaults(tmp_path):
    path = tmp_path / "defaults.yaml"
    path.write_text(render_defaults())
    # The file states every default, so the tiny run's own settings (config/presets.py) stay under it.
    assert load_config([], yaml_path=str(path)) == OmegaConf.to_object(OmegaConf.structured(Config))


def test_every_field_of_a_section_with_docs_is_documented():
    undocumented = []

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            default = getattr(cls(), f.name)
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")
            elif not f.metadata.get("help") and not prefix.endswith(("tiny.", "val_kwargs.")):
                undocumented.append(prefix + f.name)

    walk(Config, "")
    undocumented = [k for k in undocumented if k not in ("trainer.project_name", "trainer.experiment_name")]
    assert not undocumented, f"fields without a help line: {undocumented}"


def test_loaded_config_is_typed_sections_with_enums():
    cfg = load_config(["actor_rollout_ref.actor.strategy=megatron", "critic.fsdp.sharding_strategy=NO_SHARD"])
    actor = cfg.actor_rollout_ref.actor
    assert isinstance(cfg, Config) and isinstance(actor, ActorConfig) and isinstance(actor.fsdp, FSDPConfig)
    assert actor.strategy is Strategy.megatron and actor.strategy == "megatron"
    assert cfg.critic.fsdp.sharding_strategy is ShardingStrategy.NO_SHARD
    assert actor.parallel_config.megatron.pp_schedule is PipelineSchedule["1F1B"]
    assert f"{actor.precision}" == "fp32" and actor.precision is Precision.fp32  # prints as users write it
    assert "strategy: megatron" in to_yaml(cfg)


def test_enum_values_are_what_users_write():
    for enum in Choice.__subclasses__():
        for member in enum:
            assert member.name == member.value


def test_a_value_outside_a_closed_set_names_the_key_and_the_choices():
    with pytest.raises(ConfigError, match=r"critic.precision='fp8' is not valid; choose one of: fp32, bf16, fp16"):
        load_config(["critic.precision=fp8"])


def test_the_loaded_config_round_trips_through_yaml(tmp_path):
    cfg = load_config(["trainer.total_steps=7", "critic.strategy=megatron", "data.train_batch_size=16"])
    path = tmp_path / "config.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config([], yaml_path=str(path)) == cfg
