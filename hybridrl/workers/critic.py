"""The Critic role: a value model trained with the clipped value loss."""

from __future__ import annotations

import torch

from hybridrl.algorithms.losses import compute_value_loss
from hybridrl.algorithms.roles import ROLE_SECTIONS
from hybridrl.algorithms.utils import masked_mean
from hybridrl.config.schema import Config, CriticConfig
from hybridrl.engine.context import WorkerContext
from hybridrl.engine.dtypes import weights_dtype
from hybridrl.engine.packing import ModelOutput
from hybridrl.models.loader import attention_implementation, empty_value_model, enable_activation_checkpointing
from hybridrl.protocol import Batch
from hybridrl.seeds import critic_update_seed
from hybridrl.workers.context import EngineRole, build_engine
from hybridrl.workers.forward import MicroBatching, forward_rows, ppo_update, response_values


class CriticRole(EngineRole):
    def __init__(
        self, cfg: CriticConfig, ctx: WorkerContext, *, n: int, trust_remote_code: bool, seed: int, total_steps: int = 1
    ) -> None:
        """``n``: samples per prompt (the mini-batch is counted in prompts); ``seed``: the value head's;
        ``total_steps``: the learning-rate schedule's length."""
        self.cfg = cfg
        self.n = n
        self.ctx = ctx
        model, weights = empty_value_model(
            cfg.model.path or ctx.model_path,
            trust_remote_code,
            cfg.model.value_head_init_std,
            seed,
            weights_dtype(cfg.fsdp.model_dtype, trained=True, device=ctx.device),
            attention_implementation(cfg.model.use_remove_padding),
        )
        if cfg.model.enable_gradient_checkpointing:
            enable_activation_checkpointing(model)
        self.engine, self.offload = build_engine(
            model,
            weights,
            cfg,
            ctx,
            train=True,
            what="critic",
            param_offload=cfg.fsdp.param_offload,
            optimizer_offload=cfg.fsdp.optimizer_offload,
            remove_padding=cfg.model.use_remove_padding,
            total_steps=total_steps,
            sequence_parallel=cfg.ulysses_sequence_parallel_size,
        )
        self.offload.offload()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> CriticRole:
        return cls(
            cfg.critic,
            ctx,
            n=cfg.actor_rollout_ref.rollout.n,
            trust_remote_code=cfg.critic.model.trust_remote_code,
            seed=cfg.trainer.seed,
            total_steps=cfg.trainer.total_steps,
        )

    def compute_values(self, batch: Batch) -> Batch | None:
        cfg = self.cfg
        how = MicroBatching(
            cfg.forward_micro_batch_size_per_gpu,
            cfg.forward_max_token_len_per_gpu if cfg.use_dynamic_bsz else None,
            "critic.forward_max_token_len_per_gpu",
        )
        with self.offload.resident():
            out = forward_rows(self.engine, batch, how, lambda values, mb: (response_values(values, mb),))
        if out is None:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"values": out[0] * batch.tensors["response_mask"]})

    def update_critic(self, batch: Batch) -> dict[str, float]:
        cfg = self.cfg

        def micro_loss(values: ModelOutput, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
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
        with self.offload.resident(optimizer=True):
            seed = critic_update_seed(int(batch.meta.get("seed", 0)))
            return ppo_update(
                self.engine, batch, cfg, mini, seed, micro_loss, "critic", section=ROLE_SECTIONS["critic"]
            )

    def state_digest(self) -> dict[str, str]:
        with self.offload.resident():
            return {"train": self.engine.state_digest()}
