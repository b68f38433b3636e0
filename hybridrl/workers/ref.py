"""The reference policy: a frozen copy of the initial actor, for the KL term."""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.models.loader import load_causal_lm
from hybridrl.parallel.engine import make_engine
from hybridrl.protocol import Batch
from hybridrl.workers.forward import micro_batches, policy_forward


class RefRole:
    def __init__(self, cfg: Any, ctx: "WorkerContext") -> None:  # noqa: F821
        self.ctx = ctx
        self.temperature = cfg.actor_rollout_ref.rollout.temperature
        self.micro = cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
        actor = cfg.actor_rollout_ref.actor
        model = load_causal_lm(ctx.model_path, cfg.actor_rollout_ref.model.trust_remote_code)
        self.engine = make_engine(actor.strategy, model, mesh=ctx.mesh, device=ctx.device,
                                  strategy_cfg=actor.fsdp, precision=actor.precision, optim_cfg=None,
                                  ranks_per_node=ctx.ranks_per_node)
        self.engine.model.eval()

    @torch.no_grad()
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        out = []
        for mb in micro_batches(batch, self.micro):
            with self.engine.autocast():
                lp, _ = policy_forward(self.engine.model, mb.to(self.ctx.device), self.temperature,
                                       with_entropy=False)
            out.append(lp.cpu())
        return Batch.from_dict(tensors={"ref_log_probs": torch.cat(out)})
