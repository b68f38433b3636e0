"""The reference policy: a frozen copy of the initial actor, for the KL term."""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.models.loader import load_causal_lm
from hybridrl.parallel.engine import make_engine
from hybridrl.protocol import Batch
from hybridrl.workers.forward import micro_batches, response_log_probs


class RefRole:
    def __init__(self, cfg: Any, ctx: WorkerContext) -> None:  # noqa: F821
        self.ctx = ctx
        self.temperature = cfg.actor_rollout_ref.rollout.temperature
        self.micro = cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
        actor = cfg.actor_rollout_ref.actor
        model = load_causal_lm(ctx.model_path, cfg.actor_rollout_ref.model.trust_remote_code)
        self.engine = make_engine(
            actor.strategy,
            model,
            mesh=ctx.mesh,
            device=ctx.device,
            strategy_cfg=actor.fsdp,
            precision=actor.precision,
            optim_cfg=None,
            ranks_per_node=ctx.ranks_per_node,
            megatron_cfg=actor.parallel_config.megatron,
        )
        self.engine.model.eval()

    def dp_layout(self, method: str) -> tuple[int, int, bool]:
        return self.engine.dp_rank, self.engine.dp_size, self.engine.collects

    def compute_ref_log_prob(self, batch: Batch) -> Batch | None:
        out = self.engine.forward_micro_batches(
            micro_batches(batch, self.micro),
            lambda logits, mb: response_log_probs(logits, mb, self.temperature, False)[0],
        )
        if not out:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"ref_log_probs": torch.cat([lp.cpu() for lp in out])})
