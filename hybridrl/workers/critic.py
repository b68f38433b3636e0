"""The Critic role: a value model trained with the clipped value loss."""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algorithms.losses import compute_value_loss
from hybridrl.algorithms.utils import masked_mean
from hybridrl.models.loader import load_value_model
from hybridrl.parallel.engine import make_engine
from hybridrl.protocol import Batch
from hybridrl.workers.forward import micro_batches, ppo_update, value_forward


class CriticRole:
    def __init__(self, cfg: Any, ctx: "WorkerContext") -> None:  # noqa: F821
        self.cfg = cfg.critic
        self.n = cfg.actor_rollout_ref.rollout.n
        self.ctx = ctx
        path = self.cfg.model.path or ctx.model_path
        model = load_value_model(path, cfg.actor_rollout_ref.model.trust_remote_code,
                                 self.cfg.model.value_head_init_std, seed=cfg.trainer.seed)
        self.engine = make_engine(self.cfg.strategy, model, mesh=ctx.mesh, device=ctx.device,
                                  strategy_cfg=self.cfg.fsdp, precision=self.cfg.precision,
                                  optim_cfg=self.cfg.optim, gradient_scale=self.cfg.gradient_scale,
                                  ranks_per_node=ctx.ranks_per_node)

    @torch.no_grad()
    def compute_values(self, batch: Batch) -> Batch:
        values = []
        for mb in micro_batches(batch, self.cfg.forward_micro_batch_size_per_gpu):
            with self.engine.autocast():
                values.append(value_forward(self.engine.model, mb.to(self.ctx.device)).cpu())
        return Batch.from_dict(tensors={"values": torch.cat(values) * batch.tensors["response_mask"]})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg

        def micro_loss(mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
            mask = mb.tensors["response_mask"].float()
            with self.engine.autocast():
                vpreds = value_forward(self.engine.model, mb)
            vf = compute_value_loss(vpreds, mb.tensors["returns"], mb.tensors["values"], mask,
                                    cfg.cliprange_value, loss_agg_mode=cfg.loss_agg_mode)
            return vf["vf_loss"], {"critic/vf_loss": float(vf["vf_loss"].detach()),
                                   "critic/vf_clipfrac": float(vf["vf_clipfrac"]),
                                   "critic/vpred_mean": float(masked_mean(vpreds.detach(), mask))}

        mini = cfg.ppo_mini_batch_size * self.n // self.ctx.world_size
        return ppo_update(self.engine, batch, cfg, mini, int(batch.meta.get("seed", 0)) + 1, self.ctx.device,
                          micro_loss, "critic")

    def state_digest(self) -> dict[str, str]:
        return {"train": self.engine.state_digest()}
