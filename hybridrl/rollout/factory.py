"""The generation engine ``actor_rollout_ref.rollout.name`` selects, built in the actor's worker."""

from __future__ import annotations

import torch

from hybridrl.config.choices import RolloutName
from hybridrl.config.schema import RolloutConfig
from hybridrl.models.loader import empty_causal_lm
from hybridrl.models.weights import materialize
from hybridrl.rollout.base import RolloutEngine
from hybridrl.rollout.hf_engine import HFRolloutEngine
from hybridrl.rollout.sglang_engine import SGLangRolloutEngine
from hybridrl.rollout.vllm_engine import VLLMRolloutEngine


def build_rollout_engine(
    cfg: RolloutConfig,
    *,
    model_path: str,
    trust_remote_code: bool,
    dtype: torch.dtype,
    device: torch.device,
    pad_token_id: int,
    eos_token_id: int | list[int] | None,
    max_model_len: int,
    rank: int,
    world_size: int,
    seed: int,
) -> RolloutEngine:
    """The engine holds no trained weights yet: the first hand-over fills it."""
    if cfg.name == RolloutName.hf:
        model, _ = empty_causal_lm(model_path, trust_remote_code, dtype)
        materialize(model, device)
        return HFRolloutEngine(
            model,
            pad_token_id,
            eos_token_id,
            free_cache=cfg.free_cache_engine,
            max_tokens_per_generate=cfg.max_tokens_per_generate or None,
        )
    engine_class = VLLMRolloutEngine if cfg.name == RolloutName.vllm else SGLangRolloutEngine
    return engine_class(
        model_path,
        cfg,
        dtype=dtype,
        device=device,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        max_model_len=max_model_len,
        rank=rank,
        world_size=world_size,
        seed=seed,
        trust_remote_code=trust_remote_code,
    )
