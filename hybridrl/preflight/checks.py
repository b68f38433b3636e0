"""Pre-flight: the checks a run passes before any Ray actor starts; each error names the key, value and fix.

Types, closed sets (enums) and single values out of range are the config's own checks, run when it loads
(``hybridrl.config.loader``). What is left here is what one field cannot say alone, or what needs a domain
package to answer: batch arithmetic, pools against roles, layouts against the model, names that live in
registries (advantage estimators, losses, tasks), installed engines and trackers, files that must exist
(``paths``). ``check(cfg)`` runs them all; ``load_and_check`` loads a config and checks it, as every run does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from hybridrl.algorithms.advantages import ADV_ESTIMATORS, get_adv_estimator
from hybridrl.algorithms.losses import LOSS_AGG_MODES, POLICY_LOSSES
from hybridrl.algorithms.roles import ROLES, ROLLOUT, active_roles
from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.config.errors import ConfigError, all_at_once
from hybridrl.config.errors import fail as _fail
from hybridrl.config.loader import load_config
from hybridrl.config.schema import Config
from hybridrl.data.tasks import TASKS, make_task
from hybridrl.preflight.layouts import (
    check_megatron,
    check_sharding,
    check_token_budgets,
    check_ulysses,
    pp_microbatches,
)
from hybridrl.preflight.paths import check_paths
from hybridrl.preflight.rollout import check_async_training, check_rollout_engine, check_rollout_pool

logger = logging.getLogger(__name__)

T = TypeVar("T")


class _Failed:
    """What ``check``'s attempt returns for a check that failed (its problem is recorded)."""


FAILED = _Failed()


def _check_choices(cfg: Config) -> None:
    """Names checked against registries (closed sets are enums, checked by the schema)."""
    actor = cfg.actor_rollout_ref.actor
    choices: dict[str, tuple[str, Any]] = {
        "algorithm.adv_estimator": (cfg.algorithm.adv_estimator, sorted(ADV_ESTIMATORS)),
        "data.task": (cfg.data.task, sorted(TASKS)),
        "actor_rollout_ref.actor.loss_agg_mode": (actor.loss_agg_mode, LOSS_AGG_MODES),
        "critic.loss_agg_mode": (cfg.critic.loss_agg_mode, LOSS_AGG_MODES),
        "actor_rollout_ref.actor.policy_loss.loss_mode": (actor.policy_loss.loss_mode, sorted(POLICY_LOSSES)),
    }
    for key, (value, valid) in choices.items():
        if value not in valid:
            _fail(f"{key}={value!r} is not valid; choose one of: {', '.join(valid)}.")


def _check_batch_arithmetic(
    section: str, mini: int, micro: int | None, n: int, prompts: int, workers: int, pp_microbatches: int | None = None
) -> None:
    """The mini-batch must divide the step's batch and split evenly into micro-batches per worker
    (per data-parallel replica, for tensor/pipeline-parallel roles: ``workers`` is then that count).
    ``micro`` is None under ``use_dynamic_bsz``: token budgets cut the micro-batches, as in verl."""
    sequences = prompts * n
    if sequences % workers:
        _fail(
            f"data.train_batch_size ({prompts}) x actor_rollout_ref.rollout.n ({n}) = {sequences} "
            f"sequences cannot be split evenly over the {workers} workers of {section}; "
            f"make it a multiple of {workers}."
        )
    if mini > prompts or prompts % mini:
        _fail(
            f"{section}.ppo_mini_batch_size ({mini}) must divide data.train_batch_size ({prompts}); "
            f"e.g. {section}.ppo_mini_batch_size={prompts}."
        )
    mini_sequences = mini * n
    if mini_sequences % workers:
        _fail(
            f"{section}.ppo_mini_batch_size ({mini}) x rollout.n ({n}) = {mini_sequences} sequences "
            f"cannot be split over {workers} workers; make it a multiple of {workers}."
        )
    per_worker = mini_sequences // workers
    if micro is not None and per_worker % micro:
        _fail(
            f"{section}.ppo_micro_batch_size_per_gpu ({micro}) must divide the per-worker mini-batch: "
            f"ppo_mini_batch_size ({mini}) x rollout.n ({n}) / {workers} workers = {per_worker} "
            f"sequences. Pick a divisor of {per_worker}."
        )
    if pp_microbatches is not None and (pp_microbatches < 1 or per_worker % pp_microbatches):
        _fail(
            f"{section}.parallel_config.megatron.pp_microbatches ({pp_microbatches}) must divide the "
            f"{per_worker} sequences a data-parallel replica gets per mini-batch."
        )


def _check_pools(cfg: Config) -> dict[str, int]:
    mapping = cfg.resource_pool.mapping
    for role in mapping:
        if role not in ROLES:
            _fail(f"resource_pool.mapping has unknown role '{role}'; roles: {', '.join(ROLES)}.")
    for role in active_roles(cfg):
        if role not in mapping:
            _fail(f"resource_pool.mapping has no pool for role '{role}'; add resource_pool.mapping.{role}=<pool>.")
    try:
        manager = ResourcePoolManager.from_config(cfg.resource_pool, roles=active_roles(cfg))
    except (ValueError, KeyError) as exc:
        _fail(f"resource_pool: {exc}")
    return {role: manager.pool_of(role).num_workers for role in active_roles(cfg)}


def _check_algorithm(cfg: Config) -> None:
    """Options that do not fit each other are refused here, before anything starts."""
    algo = cfg.algorithm
    name = algo.adv_estimator
    estimator = get_adv_estimator(name)
    n = cfg.actor_rollout_ref.rollout.n
    if estimator.needs_critic and cfg.critic.enable is False:
        _fail(
            f"algorithm.adv_estimator={name} needs a critic (values), but critic.enable=false. "
            f"Use a critic-free estimator (grpo, rloo, reinforce_plus_plus, remax) or set critic.enable=null."
        )
    if not estimator.needs_critic and cfg.critic.enable:
        _fail(
            f"critic.enable=true, but algorithm.adv_estimator={name} does not use values; "
            f"set critic.enable=null (or use adv_estimator=gae)."
        )
    if estimator.needs_groups and n < 2:
        _fail(
            f"algorithm.adv_estimator={name} compares the samples of one prompt, so "
            f"actor_rollout_ref.rollout.n ({n}) must be at least 2."
        )
    if algo.filter_groups.enable and n < 2:
        _fail(
            f"algorithm.filter_groups.enable=true drops prompts whose samples all score the same; "
            f"it needs actor_rollout_ref.rollout.n >= 2 (got {n})."
        )


def load_and_check(overrides: Iterable[str] = (), yaml_path: str | None = None) -> Config:
    """``load_config`` (same arguments), then ``check``: the config a run starts from."""
    cfg = load_config(overrides, yaml_path=yaml_path)
    check(cfg)
    return cfg


def check(cfg: Config) -> None:
    """Every pre-flight check of ``cfg``; what fails is raised as one ``ConfigError`` listing every problem
    (each check stops at its own first; a check that needs another's result runs once that one passed)."""
    problems: list[str] = []

    def attempt(fn: Callable[..., T], *args: Any) -> T | _Failed:
        try:
            return fn(*args)
        except ConfigError as exc:
            problems.append(str(exc))
            return FAILED

    names_ok = attempt(_check_choices, cfg) is not FAILED  # the checks below look the names up
    problems += cfg.problems()  # already checked by load_config; again for a Config made another way (replace())
    if names_ok:
        attempt(_check_algorithm, cfg)
    workers = attempt(_check_pools, cfg) if names_ok else FAILED  # the roles follow from the estimator
    if not isinstance(workers, _Failed):
        attempt(check_rollout_engine, cfg, workers.get(ROLLOUT, workers["actor_rollout"]))
        attempt(check_rollout_pool, cfg)
        attempt(check_async_training, cfg)
        workers.pop(ROLLOUT, None)  # generation-only: no training engine, batch split by generation replicas
        replicas = attempt(check_megatron, cfg, workers)
        if not isinstance(replicas, _Failed):
            replicas = attempt(check_ulysses, cfg, workers, replicas)
        if not isinstance(replicas, _Failed):
            attempt(_check_batches, cfg, workers, replicas)
        attempt(check_sharding, cfg, workers)
    attempt(check_token_budgets, cfg)
    attempt(check_paths, cfg)
    if names_ok:
        attempt(_check_task, cfg)
    if problems:
        raise ConfigError(all_at_once(problems))


def _check_batches(cfg: Config, workers: dict[str, int], replicas: dict[str, int]) -> None:
    n = cfg.actor_rollout_ref.rollout.n
    prompts = cfg.data.train_batch_size
    actor = cfg.actor_rollout_ref.actor
    _check_batch_arithmetic(
        "actor_rollout_ref.actor",
        actor.ppo_mini_batch_size,
        None if actor.use_dynamic_bsz else actor.ppo_micro_batch_size_per_gpu,
        n,
        prompts,
        replicas["actor_rollout"],
        pp_microbatches(actor),
    )
    critic = cfg.critic
    if "critic" in workers:
        _check_batch_arithmetic(
            "critic",
            critic.ppo_mini_batch_size,
            None if critic.use_dynamic_bsz else critic.ppo_micro_batch_size_per_gpu,
            n,
            prompts,
            replicas["critic"],
            pp_microbatches(critic),
        )
    gen = cfg.data.gen_batch_size
    if gen is not None and not cfg.algorithm.filter_groups.enable and gen != prompts:
        _fail(
            f"data.gen_batch_size={gen} sizes DAPO's generation rounds: it needs algorithm.filter_groups.enable=true "
            f"(else each step trains on data.train_batch_size={prompts} prompts); drop it or enable the filter."
        )
    if gen is not None and (gen < 1 or (gen * n) % workers["actor_rollout"]):
        _fail(
            f"data.gen_batch_size ({gen}) x rollout.n ({n}) = {gen * n} sequences per generation round cannot be "
            f"split evenly over the {workers['actor_rollout']} actor workers; make it a multiple of them."
        )
    for role in sorted(set(workers) - {"actor_rollout"}):
        if (prompts * n) % replicas[role]:
            _fail(
                f"data.train_batch_size ({prompts}) x rollout.n ({n}) = {prompts * n} sequences cannot "
                f"be split over the {replicas[role]} data-parallel replicas of role '{role}'."
            )


def _check_task(cfg: Config) -> None:
    try:
        task = make_task(cfg.data.task, **cfg.data.task_kwargs)
    except ValueError as exc:
        _fail(f"data.task_kwargs={dict(cfg.data.task_kwargs)}: {exc}.")
    builtin = cfg.data.train_files is None
    if builtin and cfg.actor_rollout_ref.model.path is None and task.prompt_length() > cfg.data.max_prompt_length:
        _fail(
            f"data.max_prompt_length ({cfg.data.max_prompt_length}) is shorter than the "
            f"'{cfg.data.task}' prompts ({task.prompt_length()} tokens); raise it."
        )
