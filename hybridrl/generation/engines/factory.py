"""The generation engine ``actor_rollout_ref.rollout.name`` selects, built in the actor's worker."""

from __future__ import annotations

from hybridrl.config.choices import RolloutName
from hybridrl.config.schema import RolloutConfig
from hybridrl.generation.engines.base import EngineSite, RolloutEngine
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.generation.engines.sglang import SGLangRolloutEngine
from hybridrl.generation.engines.vllm import VLLMRolloutEngine
from hybridrl.models.loader import empty_causal_lm
from hybridrl.models.weights import materialize


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
        )
    engine_class = VLLMRolloutEngine if cfg.name == RolloutName.vllm else SGLangRolloutEngine
    return engine_class(cfg, site)
