"""Load the configuration: shipped YAML defaults + dotted overrides, checked against the schema."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from importlib import resources

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from hybridrl.config.schema import Config

DEFAULTS_FILE = "ppo_trainer.yaml"


class ConfigError(ValueError):
    """A configuration mistake, with a message that names the key and the fix."""


def default_yaml() -> DictConfig:
    text = resources.files("hybridrl.config").joinpath(DEFAULTS_FILE).read_text()
    return OmegaConf.create(text)


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in node.items_ex(resolve=False):
        full = f"{prefix}{key}"
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
        name = strategy.get("name", "fsdp")
        params = strategy.get("params") or {}
        node["strategy"] = name
        if params and name == "megatron":
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
        critic["strategy"] = "megatron"
    return layer


def load_config(overrides: Iterable[str] = (), yaml_path: str | None = None) -> DictConfig:
    """Return the resolved, typed and validated config.

    ``yaml_path`` is an optional user YAML merged over the shipped defaults, before ``overrides``.
    """
    schema = OmegaConf.structured(Config)
    layers = [default_yaml()]
    if yaml_path is not None:
        try:
            layers.append(OmegaConf.load(yaml_path))
        except (OSError, OmegaConfBaseException) as exc:
            raise ConfigError(f"Could not read config file {yaml_path}: {exc}") from None
    layers.append(_parse_overrides(overrides))
    layers = [layers[0]] + [_normalize_seed_strategy(layer) for layer in layers[1:]]
    cfg = schema
    for layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, layer)
        except ConfigKeyError as exc:
            key = exc.full_key or str(exc.key)
            hint = _closest(key, _leaf_keys(OmegaConf.merge(schema, layers[0])))
            raise ConfigError(f"Unknown config key '{key}'.{hint}") from None
        except ValidationError as exc:
            raise ConfigError(f"Bad value for config key '{exc.full_key}': {exc.msg.splitlines()[0]}") from None
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"Could not resolve the config: {exc}") from None
    if missing:
        raise ConfigError(f"Config keys without a value: {', '.join(missing)}.")
    OmegaConf.set_readonly(cfg, True)
    from hybridrl.config.validate import validate

    validate(cfg)
    return cfg


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
