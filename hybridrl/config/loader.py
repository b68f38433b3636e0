"""Load the configuration: the schema's defaults, a user YAML and dotted overrides, merged and checked with
omegaconf, then turned into the typed, frozen ``Config`` that every component reads its section from."""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from hybridrl.config.choices import Strategy
from hybridrl.config.compat.verl.keys import verl_rule
from hybridrl.config.errors import ConfigError, all_at_once
from hybridrl.config.presets import TINY_RUN
from hybridrl.config.schema import Config

__all__ = ["ConfigError", "check_ranges", "load_config", "to_dict", "to_yaml"]

logger = logging.getLogger("hybridrl")


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


def _bad_value(exc: ValidationError | OmegaConfBaseException) -> str:
    """One line naming the key: a closed set (an enum in the schema) lists its values."""
    first = (getattr(exc, "msg", None) or str(exc)).splitlines()[0]
    match = _ENUM_ERROR.match(first)
    key = getattr(exc, "full_key", None)
    if match:
        return f"{key}={match['value']!r} is not valid; choose one of: {match['valid']}."
    if key is None:  # omegaconf names no key when a whole section gets a scalar (data=3)
        return f"Bad value for a config section: {first}. A section takes a mapping of its keys."
    return f"Bad value for config key '{key}': {first}"


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_0-9][A-Za-z0-9_]*)*")


def _parse_overrides(overrides: Iterable[str]) -> tuple[DictConfig, list[str]]:
    """The ``key=value`` overrides as one layer, and the keys of Hydra's ``~key`` (back to the default).
    Hydra's ``+key=value`` and ``++key=value`` mean ``key=value`` here: every key already exists."""
    pairs, removed = [], []
    for item in overrides:
        if item.startswith("--"):
            raise ConfigError(
                f"'{item}' is not an override: options come first (--config FILE, then key=value overrides); "
                f"see `hybridrl config show` for every key."
            )
        if item.startswith("~") and "=" not in item:
            removed.append(item[1:])
            continue
        item = item.lstrip("+")
        key, sep, value = item.partition("=")
        if not sep or not _KEY.fullmatch(key):
            raise ConfigError(f"Override '{item}' is not of the form key=value (e.g. trainer.total_steps=20).")
        try:
            pairs.append(OmegaConf.from_dotlist([item]))
        except (OmegaConfBaseException, yaml.YAMLError) as exc:
            detail = " ".join(str(getattr(exc, "problem", None) or exc).split())
            raise ConfigError(f"Override {item}: the value is not valid YAML ({detail}); quote it.") from None
    for key in removed:
        if not _KEY.fullmatch(key):
            raise ConfigError(f"Override '~{key}' does not name a config key (e.g. ~trainer.logger).")
    return cast(DictConfig, OmegaConf.merge(*pairs)) if pairs else OmegaConf.create({}), removed


def _lists_from_scalars(layer: DictConfig, schema: DictConfig, prefix: str = "") -> None:
    """A single value where the schema has a list is that one-element list, as verl accepts
    (``trainer.logger=console``)."""
    for key, value in list(layer.items_ex(resolve=False)):
        path = f"{prefix}{key!s}"
        target = OmegaConf.select(schema, path, default=None, throw_on_missing=False)
        if isinstance(value, DictConfig) and isinstance(target, DictConfig):
            _lists_from_scalars(value, schema, path + ".")
        elif isinstance(target, ListConfig) and not isinstance(value, ListConfig) and value is not None:
            layer[key] = [value]


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
        # The type first: given a scalar, omegaconf would read the text again as a key ("x" -> {x: null}).
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        if raw is not None and not isinstance(raw, dict):
            kinds: dict[type, str] = {list: "a list", str: "a string", int: "a number", float: "a number"}
            kind = kinds.get(type(raw), "a scalar")
            raise ConfigError(
                f"Config file {path} holds {kind}, not a mapping of sections (data:, actor_rollout_ref:, trainer:, ...)."
            )
        loaded = OmegaConf.load(path)  # again, for its check of duplicate keys
    except UnicodeDecodeError:
        raise ConfigError(f"Config file {path} is not UTF-8 text: give a YAML file.") from None
    except IsADirectoryError:
        raise ConfigError(f"Config file {path} is a directory: give a YAML file.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"Config file {path} is not valid YAML{where}: {problem}.") from None
    except (OSError, OmegaConfBaseException) as exc:
        raise ConfigError(f"Could not read config file {path}: {str(exc).splitlines()[0]}") from None
    return _without_hydra_header(cast(DictConfig, loaded), path)


#: A Hydra config's ``defaults`` entries that mean what hybridrl does anyway: start from verl's ppo_trainer
#: defaults (hybridrl's schema), then this file.
_HYDRA_DEFAULTS = ("ppo_trainer", "_self_")


def _without_hydra_header(loaded: DictConfig, path: str) -> DictConfig:
    """verl's example configs (``--config-path/--config-name``) start with Hydra's ``hydra.searchpath`` (where
    to find ppo_trainer: not needed here) and ``defaults: [ppo_trainer, _self_]`` (hybridrl's own order)."""
    if "hydra" in loaded:
        del loaded["hydra"]
        logger.info("Config file %s: its hydra: section is not needed in hybridrl (ignored)", path)
    if "defaults" in loaded:
        entries = OmegaConf.to_container(loaded["defaults"]) if OmegaConf.is_list(loaded["defaults"]) else None
        other = [e for e in entries or [loaded["defaults"]] if e not in _HYDRA_DEFAULTS]
        if other:
            raise ConfigError(
                f"Config file {path}: defaults entry {other[0]!r} is a Hydra config group hybridrl does not have; "
                f"every file starts from hybridrl's defaults (verl's ppo_trainer): keep {list(_HYDRA_DEFAULTS)} only "
                f"and write that group's keys into the file."
            )
        del loaded["defaults"]
    return loaded


def load_config(overrides: Iterable[str] = (), yaml_path: str | None = None) -> Config:
    """Return the resolved, typed and read-only config, its single values checked (types, closed sets,
    ranges).

    ``yaml_path`` is an optional user YAML merged over the shipped defaults, before ``overrides``. What
    needs more than the config itself (registries, pools, layouts, files) is ``hybridrl.preflight``'s:
    a run loads its config with ``preflight.checks.load_and_check``.
    """
    schema = OmegaConf.structured(Config)
    layers: list[DictConfig] = []
    if yaml_path is not None:
        layers.append(_read_yaml(yaml_path))
    overrides_layer, removed = _parse_overrides(overrides)
    layers.append(overrides_layer)
    layers = [_normalize_seed_strategy(layer) for layer in layers]
    for key in removed:  # Hydra's ~key: what the user layers set for it goes, so the default holds
        if OmegaConf.select(schema, key, default=_ABSENT) is _ABSENT:
            raise ConfigError(_unknown_key(key, schema))
        parent, _, leaf = key.rpartition(".")
        for layer in layers:
            node = OmegaConf.select(layer, parent, default=None) if parent else layer
            if isinstance(node, DictConfig) and leaf in node:
                del node[leaf]
    found = _SortedKeys()
    for layer in layers:
        _sort_out_keys(layer, schema, layer, schema, found)
    for layer in layers:
        _lists_from_scalars(layer, schema)
    if _model_path(layers) is None:  # the built-in tiny model and task: its own settings under the user's
        layers = [OmegaConf.create(TINY_RUN), *layers]
    cfg = _merge(schema, layers, found.problems)
    unequal = [
        f"'{verl_key}={value}': hybridrl's reference shares {key} (={OmegaConf.select(cfg, key)}); set that instead"
        for verl_key, value, key in found.shared
        if str(OmegaConf.select(cfg, key)) != str(value)
    ]
    if unequal:
        raise ConfigError(all_at_once(unequal))
    found.log()
    try:  # resolves interpolations such as trainer.output_dir's
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            raise ConfigError(f"Config keys without a value: {', '.join(missing)}.")
        typed = cast(Config, OmegaConf.to_object(cfg))
    except OmegaConfBaseException as exc:
        detail = " ".join(str(getattr(exc, "msg", None) or exc).split("\n")[0].split())
        raise ConfigError(f"Could not resolve config key '{getattr(exc, 'full_key', None)}': {detail}.") from None
    typed = _verl_sizes(typed)
    check_ranges(typed)
    return typed


def check_ranges(cfg: Config) -> None:
    """Raise one ``ConfigError`` listing every single value out of its range (each section's ``problems``)."""
    problems = cfg.problems()
    if problems:
        raise ConfigError(all_at_once(problems))


def _verl_sizes(cfg: Config) -> Config:
    """verl's ways to size a run, turned into hybridrl's keys: ``trainer.total_training_steps`` is
    ``total_steps``; ``n_gpus_per_node`` x ``nnodes`` is the global pool's GPUs (as verl's one pool)."""
    trainer, pools = cfg.trainer, cfg.resource_pool
    if trainer.total_training_steps is not None:
        trainer = replace(trainer, total_steps=trainer.total_training_steps)
    if trainer.n_gpus_per_node is not None or trainer.nnodes is not None:
        others = sorted(set(pools.mapping.values()) - {"global_pool"})
        if others:
            raise ConfigError(
                f"trainer.n_gpus_per_node/nnodes size resource_pool.pools.global_pool only, but roles map to "
                f"{others}: size every pool in resource_pool.pools instead."
            )
        gpus = (trainer.n_gpus_per_node or 8) * (trainer.nnodes or 1)
        pools = replace(
            pools, pools={**pools.pools, "global_pool": {**pools.pools.get("global_pool", {}), "GPU": gpus}}
        )
    return _async_batch(replace(cfg, trainer=trainer, resource_pool=pools))


def _async_batch(cfg: Config) -> Config:
    """Fully asynchronous training sizes a step as verl's recipe does: ``require_batches`` mini-batches of
    ``ppo_mini_batch_size`` prompts (verl's ``data.train_batch_size`` is not used there)."""
    if not cfg.async_training.enable:
        return cfg
    prompts = cfg.async_training.require_batches * cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    if prompts != cfg.data.train_batch_size:
        logger.info(
            "async_training: a step trains on require_batches x ppo_mini_batch_size = %d prompts "
            "(data.train_batch_size=%d is not used)",
            prompts,
            cfg.data.train_batch_size,
        )
    return replace(cfg, data=replace(cfg.data, train_batch_size=prompts))


_ABSENT = object()


def _model_path(layers: list[DictConfig]) -> Any:
    """``actor_rollout_ref.model.path`` as the layers leave it (the last one that sets it; else the
    schema's null), read before merging so that the merge runs once."""
    path = None
    for layer in layers:
        node: Any = layer
        for part in ("actor_rollout_ref", "model"):
            node = node.get(part) if isinstance(node, DictConfig) else None
        if isinstance(node, DictConfig) and "path" in node:
            path = dict(node.items_ex(resolve=False))["path"]  # unresolved: an interpolation counts as set
    return path


def _merge(schema: DictConfig, layers: list[DictConfig], problems: list[str]) -> DictConfig:
    """The layers merged over the schema in order. Any ``problems`` already found, and every value that
    does not merge (each checked alone once one fails), are raised together as one error."""
    cfg = schema
    for layer in layers:
        try:
            cfg = cast(DictConfig, OmegaConf.merge(cfg, layer))
        except (ConfigKeyError, ValidationError, OmegaConfBaseException, TypeError) as exc:
            bad = [p for key, value in _leaf_items(layer) if (p := _merge_problem(schema, key, value))]
            problems = problems + (bad or [_merge_error(exc, layer, schema)])
    if problems:
        raise ConfigError(all_at_once(problems))
    return cfg


def _merge_problem(schema: DictConfig, key: str, value: Any) -> str | None:
    """What is wrong with ``key=value`` alone over the schema, or None."""
    try:
        OmegaConf.merge(schema, _at(key, value))
    except (ConfigKeyError, ValidationError, OmegaConfBaseException, TypeError) as exc:
        return _merge_error(exc, _at(key, value), schema)
    return None


def _merge_error(exc: Exception, layer: DictConfig, schema: DictConfig) -> str:
    if isinstance(exc, ConfigKeyError):
        return _unknown_key(exc.full_key or str(exc.key), schema)
    if isinstance(exc, TypeError):  # omegaconf names no key when a list meets a mapping
        return _incompatible(layer, schema, exc)
    return _bad_value(cast(OmegaConfBaseException, exc))


def _leaf_items(node: DictConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, unresolved value) of every leaf under ``node``; an empty mapping counts as a leaf."""
    items: list[tuple[str, Any]] = []
    for key, value in node.items_ex(resolve=False):
        path = f"{prefix}{key!s}"
        if isinstance(value, DictConfig) and len(value):
            items.extend(_leaf_items(value, path + "."))
        else:
            items.append((path, OmegaConf.to_container(value) if OmegaConf.is_config(value) else value))
    return items


@dataclass
class _SortedKeys:
    """What ``_sort_out_keys`` found in the user's layers."""

    problems: list[str] = field(default_factory=list)  # one line each
    renamed: list[str] = field(default_factory=list)  # "verl_key=v -> hybridrl_key=v"
    shared: list[tuple[str, Any, str]] = field(default_factory=list)  # (verl key, value, hybridrl key it must equal)
    accepted: list[str] = field(default_factory=list)  # "verl_key=v", no effect here

    def log(self) -> None:
        if self.renamed:
            logger.info("verl keys taken as hybridrl's: %s", ", ".join(self.renamed))
        if self.accepted:
            logger.info(
                "verl keys with no effect in hybridrl (a feature left off, or no job here): %s",
                ", ".join(self.accepted),
            )


def _sort_out_keys(
    node: DictConfig, schema: DictConfig, layer: DictConfig, root: DictConfig, found: _SortedKeys, prefix: str = ""
) -> None:
    """Take every key of ``node`` (a user layer, or a section of it) that hybridrl's schema does not have
    out of it: verl's spelling of a hybridrl key moves there, a verl key at its off value or with no job
    here goes, and the rest become one problem line each: the verl answer, or the nearest hybridrl key.
    The leaves under an unknown section are looked up one by one (``fsdp_config.param_offload``, not
    ``fsdp_config``)."""
    for key, value in list(node.items_ex(resolve=False)):
        path = f"{prefix}{key!s}"
        if str(key) in schema:
            section = schema[str(key)]
            structured = isinstance(section, DictConfig) and OmegaConf.get_type(section) not in (dict, None)
            if isinstance(value, DictConfig) and structured:
                _sort_out_keys(value, section, layer, root, found, path + ".")
            continue
        del node[str(key)]
        leaves = _leaf_items(value, path + ".") if isinstance(value, DictConfig) and len(value) else [(path, value)]
        rules = [(leaf, leaf_value, verl_rule(leaf)) for leaf, leaf_value in leaves]
        if not any(rule for _, _, rule in rules):  # not verl's either: the unknown key itself, once
            found.problems.append(_unknown_key(path, root))
            continue
        for leaf, leaf_value, rule in rules:
            outcome = rule.apply(leaf, leaf_value) if rule is not None else None
            if outcome is None:
                found.problems.append(_unknown_key(leaf, root))
            elif outcome.refusal is not None:
                found.problems.append(outcome.refusal)
            elif outcome.equals is not None:
                found.shared.append((leaf, leaf_value, outcome.equals))
            elif outcome.target is None:
                found.accepted.append(f"{leaf}={leaf_value}")
            elif OmegaConf.select(layer, outcome.target, default=_ABSENT) is _ABSENT:  # the hybridrl key wins
                OmegaConf.update(layer, outcome.target, outcome.value, force_add=True)
                found.renamed.append(f"{leaf}={leaf_value} -> {outcome.target}={outcome.value}")


def _incompatible(layer: DictConfig, schema: DictConfig, exc: TypeError) -> str:
    """Find the key whose value omegaconf could not merge (it does not say), by merging leaf by leaf."""
    for key in _leaf_keys(layer):
        value = OmegaConf.select(layer, key, throw_on_resolution_failure=False)
        if isinstance(value, DictConfig):
            continue
        try:
            OmegaConf.merge(schema, OmegaConf.from_dotlist([]), _at(key, value))
        except (TypeError, OmegaConfBaseException):
            kind = "a list" if isinstance(value, ListConfig) else "a value"
            return f"Bad value for config key '{key}': {kind} where the schema has a mapping ({exc})."
    return f"Bad value in the config: {exc}."


def _at(key: str, value: Any) -> DictConfig:
    node: Any = value
    for part in reversed(key.split(".")):
        node = {part: node}
    return OmegaConf.create(node)


def _unknown_key(key: str, schema: DictConfig) -> str:
    """The verl mapping where the key is verl's (a near name would mislead: n_gpus_per_node is not seed),
    else the closest hybridrl key."""
    rule = verl_rule(key)
    if rule is not None:
        return f"'{key}' is a verl key that hybridrl does not take: {rule.answer}."
    return f"Unknown config key '{key}'.{_closest(key, _leaf_keys(schema))}"


def to_dict(cfg: Config) -> dict[str, Any]:
    """The config as plain nested dicts and strings (what trackers such as wandb and mlflow record)."""
    return cast(dict[str, Any], OmegaConf.to_container(OmegaConf.structured(cfg), enum_to_str=True))


def to_yaml(cfg: Config) -> str:
    """The config as YAML (what ``config show`` prints and each run saves as ``config.yaml``)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg), resolve=True)
