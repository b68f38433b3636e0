"""The generation engine ``actor_rollout_ref.rollout.name`` selects, built in the actor's worker."""

from __future__ import annotations

import logging

import torch

from hybridrl.config.choices import RolloutName
from hybridrl.config.schema import RolloutConfig
from hybridrl.generation.engines.base import EngineSite, RolloutEngine
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.generation.engines.sglang import SGLangRolloutEngine
from hybridrl.generation.engines.vllm import VLLMRolloutEngine
from hybridrl.models.loader import empty_causal_lm
from hybridrl.models.weights import materialize

logger = logging.getLogger(__name__)


def hf_static_cache(cfg: RolloutConfig, device: torch.device) -> bool:
    """The hf engine's GPU mode (static KV cache, compiled decode step) where ``enforce_eager=false`` asks
    for CUDA graphs, as it does of vLLM and SGLang; on CPU compiling costs more than a tiny step saves."""
    on = not cfg.enforce_eager and device.type == "cuda"
    if not cfg.enforce_eager and not on:
        logger.info("rollout.enforce_eager=false: the hf engine compiles its decode step on CUDA only; eager here.")
    return on


def build_rollout_engine(cfg: RolloutConfig, site: EngineSite) -> RolloutEngine:
    """The engine holds no trained weights yet: the first hand-over fills it."""
    if cfg.name == RolloutName.hf:
        model, _ = empty_causal_lm(site.model_path, site.trust_remote_code, site.dtype)
        materialize(model, site.device)
        return HFRolloutEngine(
            model,
            site.pad_token_id,
            site.eos_token_id,
            free_cache=cfg.free_cache_engine,
            max_tokens_per_generate=cfg.max_tokens_per_generate or None,
            static_cache=hf_static_cache(cfg, site.device),
        )
    engine_class = VLLMRolloutEngine if cfg.name == RolloutName.vllm else SGLangRolloutEngine
    return engine_class(cfg, site)
