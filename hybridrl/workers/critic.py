"""The Critic role: a value model trained with the clipped value loss."""

from __future__ import annotations

from typing import Any

import torch

from hybridrl.algorithms.losses import compute_value_loss
from hybridrl.algorithms.utils import masked_mean
from hybridrl.models.loader import load_value_model
from hybridrl.parallel.engine import make_engine
from hybridrl.protocol import Batch
from hybridrl.workers.forward import micro_batches, ppo_update, response_values


class CriticRole:
    def __init__(self, cfg: Any, ctx: WorkerContext) -> None:  # noqa: F821
        self.cfg = cfg.critic
        self.n = cfg.actor_rollout_ref.rollout.n
        self.ctx = ctx
        path = self.cfg.model.path or ctx.model_path
        model = load_value_model(
            path,
            cfg.actor_rollout_ref.model.trust_remote_code,
            self.cfg.model.value_head_init_std,
            seed=cfg.trainer.seed,
        )
        self.engine = make_engine(
            self.cfg.strategy,
            model,
            mesh=ctx.mesh,
            device=ctx.device,
            strategy_cfg=self.cfg.fsdp,
            precision=self.cfg.precision,
            optim_cfg=self.cfg.optim,
            gradient_scale=self.cfg.gradient_scale,
            ranks_per_node=ctx.ranks_per_node,
            megatron_cfg=self.cfg.parallel_config.megatron,
        )

    def dp_layout(self, method: str) -> tuple[int, int, bool]:
        return self.engine.dp_rank, self.engine.dp_size, self.engine.collects

    def compute_values(self, batch: Batch) -> Batch | None:
        out = self.engine.forward_micro_batches(
            micro_batches(batch, self.cfg.forward_micro_batch_size_per_gpu), response_values
        )
        if not out:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"values": torch.cat([v.cpu() for v in out]) * batch.tensors["response_mask"]})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg

        def micro_loss(values: torch.Tensor, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
            mask = mb.tensors["response_mask"].float()
            vpreds = response_values(values, mb)
            vf = compute_value_loss(
                vpreds,
                mb.tensors["returns"],
                mb.tensors["values"],
                mask,
                cfg.cliprange_value,
                loss_agg_mode=cfg.loss_agg_mode,
            )
            return vf["vf_loss"], {
                "critic/vf_loss": float(vf["vf_loss"].detach()),
                "critic/vf_clipfrac": float(vf["vf_clipfrac"]),
                "critic/vpred_mean": float(masked_mean(vpreds.detach(), mask)),
            }

        mini = cfg.ppo_mini_batch_size * self.n // self.engine.dp_size
        return ppo_update(self.engine, batch, cfg, mini, int(batch.meta.get("seed", 0)) + 1, micro_loss, "critic")

    def state_digest(self) -> dict[str, str]:
        return {"train": self.engine.state_digest()}
