"""The reference policy: a frozen copy of the initial actor, for the KL term."""

from __future__ import annotations

import torch

from hybridrl.config.schema import ActorConfig, Config
from hybridrl.models.loader import empty_causal_lm
from hybridrl.parallel.dtypes import weights_dtype
from hybridrl.protocol import Batch
from hybridrl.workers.context import EngineRole, WorkerContext, build_engine
from hybridrl.workers.forward import micro_batches, response_log_probs


class RefRole(EngineRole):
    def __init__(
        self,
        actor: ActorConfig,
        ctx: WorkerContext,
        *,
        micro_batch_size: int,
        temperature: float,
        trust_remote_code: bool,
        param_offload: bool = False,
    ) -> None:
        """Laid out as the actor (``actor``'s strategy and sharding), without an optimizer; its weights'
        dtype is the frozen roles' default unless ``actor.fsdp.model_dtype`` names one."""
        self.ctx = ctx
        self.temperature = temperature
        self.micro = micro_batch_size
        dtype = weights_dtype(actor.fsdp.model_dtype, trained=False, device=ctx.device)
        model, weights = empty_causal_lm(ctx.model_path, trust_remote_code, dtype)
        self.engine, self.offload = build_engine(
            model, weights, actor, ctx, train=False, what="ref", param_offload=param_offload
        )
        self.offload.offload()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> RefRole:
        arr = cfg.actor_rollout_ref
        return cls(
            arr.actor,
            ctx,
            micro_batch_size=arr.ref.log_prob_micro_batch_size_per_gpu,
            temperature=arr.rollout.temperature,
            trust_remote_code=arr.model.trust_remote_code,
            param_offload=arr.ref.param_offload,
        )

    def compute_ref_log_prob(self, batch: Batch) -> Batch | None:
        with self.offload.resident():
            out = self.engine.forward_micro_batches(
                micro_batches(batch, self.micro),
                lambda logits, mb: response_log_probs(logits, mb, self.temperature, False)[0],
            )
        if not out:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"ref_log_probs": torch.cat([lp.cpu() for lp in out])})
