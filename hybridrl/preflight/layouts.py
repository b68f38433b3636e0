"""Pre-flight checks of parallel layouts against the model: Megatron tensor/pipeline/sequence parallel sizes,
Ulysses sequence parallel, FSDP sharding groups and token-budget micro-batches. Model shapes come from the
model's config.json (or the built-in tiny model's settings), read without loading any weights."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hybridrl.algorithms.roles import ROLE_SECTIONS, engine_section, ulysses_size
from hybridrl.config.choices import Strategy
from hybridrl.config.errors import fail as _fail
from hybridrl.config.schema import Config, TrainedRoleConfig
from hybridrl.engine.megatron.layout import megatron_fit_errors
from hybridrl.models.ulysses import ulysses_fit_errors

logger = logging.getLogger(__name__)


def text_config(path: str, trust_remote_code: bool) -> Any:
    """The (text) model config in ``path``, or None when it has no config.json (the model loader says so)."""
    if not (Path(path) / "config.json").is_file():
        return None
    # transformers is heavy: only a model given by path needs it here.
    from transformers import AutoConfig  # noqa: PLC0415 - heavy, needed only for a model directory

    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    return getattr(config, "text_config", None) or config


def check_token_budgets(cfg: Config) -> None:
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


def pp_microbatches(section: TrainedRoleConfig) -> int | None:
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
    config = text_config(path, trust)
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


def check_megatron(cfg: Config, workers: dict[str, int]) -> dict[str, int]:
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


def check_ulysses(cfg: Config, workers: dict[str, int], replicas: dict[str, int]) -> dict[str, int]:
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


def check_sharding(cfg: Config, workers: dict[str, int]) -> None:
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
