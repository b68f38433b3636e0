"""Load the configuration: the schema's defaults, a user YAML and dotted overrides, merged and checked with
omegaconf, then turned into the typed, frozen ``Config`` that every component reads its section from."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from hybridrl.config.choices import Strategy
from hybridrl.config.errors import ConfigError
from hybridrl.config.schema import Config
from hybridrl.config.validate import validate

__all__ = ["ConfigError", "load_config", "to_dict", "to_yaml"]


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items_ex(resolve=False):
        full = f"{prefix}{key!s}"
        if isinstance(value, DictConfig):
            keys.append(full)
            keys.extend(_leaf_keys(value, full + "."))
        else:
            keys.append(full)
    return keys


def _closest(key: str, valid: Iterable[str]) -> str:
    valid = list(valid)
    tail = key.rsplit(".", 1)[-1]
    # Match the whole dotted path first, then the last component (a typo in the leaf name).
    matches = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if not matches:
        by_tail = {k.rsplit(".", 1)[-1]: k for k in valid}
        tail_matches = difflib.get_close_matches(tail, list(by_tail), n=1, cutoff=0.6)
        matches = [by_tail[t] for t in tail_matches]
    return f" Did you mean '{matches[0]}'?" if matches else ""


_ENUM_ERROR = re.compile(r"Invalid value '(?P<value>.*)', expected one of \[(?P<valid>.*)\]")


def _bad_value(exc: ValidationError) -> str:
    """One line naming the key: a closed set (an enum in the schema) lists its values."""
    first = (exc.msg or str(exc)).splitlines()[0]
    match = _ENUM_ERROR.match(first)
    if match:
        return f"{exc.full_key}={match['value']!r} is not valid; choose one of: {match['valid']}."
    return f"Bad value for config key '{exc.full_key}': {first}"


def _parse_overrides(overrides: Iterable[str]) -> DictConfig:
    overrides = list(overrides)
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"Override '{item}' is not of the form key=value (e.g. trainer.total_steps=20).")
    try:
        return OmegaConf.from_dotlist(overrides)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"Could not parse overrides {overrides}: {exc}") from None


STRATEGY_SECTIONS = ("actor_rollout_ref.actor", "critic")


def _normalize_seed_strategy(layer: DictConfig) -> DictConfig:
    """Accept the seed's ``strategy: {name: fsdp, params: {...}}`` form for a role: it means
    ``strategy: fsdp`` plus the params under that role's ``fsdp`` section."""
    for section in STRATEGY_SECTIONS:
        node = OmegaConf.select(layer, section)
        strategy = node.get("strategy") if isinstance(node, DictConfig) else None
        if not isinstance(strategy, DictConfig):
            continue
        unknown = set(strategy) - {"name", "params"}
        if unknown:
            raise ConfigError(f"{section}.strategy as a mapping takes 'name' and 'params'; got {sorted(unknown)}.")
        name = strategy.get("name", Strategy.fsdp.value)
        params = strategy.get("params") or {}
        node["strategy"] = name
        if params and name == Strategy.megatron:
            node["parallel_config"] = OmegaConf.merge(node.get("parallel_config") or {}, {"megatron": params})
        elif params:
            node[name] = OmegaConf.merge(node.get(name) or {}, params)
    return _move_seed_parallel_config(layer)


def _move_seed_parallel_config(layer: DictConfig) -> DictConfig:
    """The seed writes ``trainer.parallel_config.megatron.tp_size=4`` for its Megatron-style critic: that
    is ``critic.parallel_config.megatron.*`` with ``critic.strategy=megatron`` (unless the same layer
    sets the critic's strategy itself)."""
    trainer = layer.get("trainer") if isinstance(layer, DictConfig) else None
    if not isinstance(trainer, DictConfig) or "parallel_config" not in trainer:
        return layer
    seed = trainer.pop("parallel_config")
    unknown = set(seed or {}) - {"megatron"}
    if unknown:
        raise ConfigError(
            f"trainer.parallel_config takes only 'megatron' (the critic's Megatron-style layout); "
            f"got {sorted(unknown)}."
        )
    if not isinstance(layer.get("critic"), DictConfig):
        layer["critic"] = {}
    critic = layer["critic"]  # assignment copies a node: fetch the one inside the layer
    critic["parallel_config"] = OmegaConf.merge(critic.get("parallel_config") or {}, seed)
    if "strategy" not in critic:
        critic["strategy"] = Strategy.megatron.value
    return layer


def _read_yaml(path: str) -> DictConfig:
    """A user's config file as one mapping of sections, or a one-line error with the line at fault."""
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"Config file {path} is not valid YAML{where}: {problem}.") from None
    except (OSError, OmegaConfBaseException) as exc:
        raise ConfigError(f"Could not read config file {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(
            f"Config file {path} holds a {type(loaded).__name__.removesuffix('Config').lower()}, not a mapping of "
            f"sections (data:, actor_rollout_ref:, trainer:, ...)."
        )
    return loaded


def load_config(overrides: Iterable[str] = (), yaml_path: str | None = None) -> Config:
    """Return the resolved, typed, validated and read-only config.

    ``yaml_path`` is an optional user YAML merged over the shipped defaults, before ``overrides``.
    """
    schema = OmegaConf.structured(Config)
    layers: list[DictConfig] = []
    if yaml_path is not None:
        layers.append(_read_yaml(yaml_path))
    layers.append(_parse_overrides(overrides))
    layers = [_normalize_seed_strategy(layer) for layer in layers]
    cfg = schema
    for layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except ConfigKeyError as exc:
            key = exc.full_key or str(exc.key)
            hint = _closest(key, _leaf_keys(schema))
            raise ConfigError(f"Unknown config key '{key}'.{hint}") from None
        except ValidationError as exc:
            raise ConfigError(_bad_value(exc)) from None
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"Config keys without a value: {', '.join(missing)}.")
    try:  # resolves interpolations such as trainer.output_dir's
        typed = cast(Config, OmegaConf.to_object(cfg))
    except OmegaConfBaseException as exc:
        raise ConfigError(f"Could not resolve the config: {exc}") from None
    validate(typed)
    return typed


def to_dict(cfg: Config) -> dict[str, Any]:
    """The config as plain nested dicts and strings (what trackers such as wandb and mlflow record)."""
    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True))


def to_yaml(cfg: Config) -> str:
    """The config as YAML (what ``config show`` prints and each run saves as ``config.yaml``)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), resolve=True)
