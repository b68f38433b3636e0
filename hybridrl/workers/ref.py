"""The reference policy: a frozen copy of the initial actor, for the KL term."""

from __future__ import annotations

import torch

from hybridrl.config.schema import ActorConfig, Config
from hybridrl.models.loader import load_causal_lm
from hybridrl.parallel.factory import make_engine
from hybridrl.protocol import Batch
from hybridrl.workers.context import EngineRole, WorkerContext
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
    ) -> None:
        """Laid out as the actor (``actor``'s strategy and sharding), without an optimizer."""
        self.ctx = ctx
        self.temperature = temperature
        self.micro = micro_batch_size
        model = load_causal_lm(ctx.model_path, trust_remote_code)
        self.engine = make_engine(
            model, actor, mesh=ctx.mesh, device=ctx.device, train=False, ranks_per_node=ctx.ranks_per_node
        )
        self.engine.model.eval()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> RefRole:
        arr = cfg.actor_rollout_ref
        return cls(
            arr.actor,
            ctx,
            micro_batch_size=arr.ref.log_prob_micro_batch_size_per_gpu,
            temperature=arr.rollout.temperature,
            trust_remote_code=arr.model.trust_remote_code,
        )

    def compute_ref_log_prob(self, batch: Batch) -> Batch | None:
        out = self.engine.forward_micro_batches(
            micro_batches(batch, self.micro),
            lambda logits, mb: response_log_probs(logits, mb, self.temperature, False)[0],
        )
        if not out:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"ref_log_probs": torch.cat([lp.cpu() for lp in out])})
