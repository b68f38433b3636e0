"""The ActorRollout role: the policy trained under a parallel strategy, plus its generation engine (or the
sending end of the weight channel to a rollout pool of its own)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from hybridrl.algorithms.losses import agg_loss, compute_kl_loss, get_policy_loss
from hybridrl.algorithms.roles import ROLE_SECTIONS, active_roles, ref_in_actor
from hybridrl.algorithms.token_logprobs import TokenScoring
from hybridrl.checkpoint.hf_files import ShardedWeightsWriter
from hybridrl.config.choices import Precision, Strategy
from hybridrl.config.schema import ActorConfig, Config, ModelConfig, RefConfig, RolloutConfig
from hybridrl.engine.context import DataLayout, WorkerContext
from hybridrl.engine.dtypes import rollout_dtype, weights_dtype
from hybridrl.engine.packing import ModelOutput
from hybridrl.generation.engines.base import RolloutEngine
from hybridrl.generation.generation import Generation, open_channel
from hybridrl.generation.weight_channel import ChannelPlan
from hybridrl.generation.weight_sync import WeightSender
from hybridrl.models.loader import (
    attention_implementation,
    config_for_export,
    empty_causal_lm,
    enable_activation_checkpointing,
    load_tokenizer,
)
from hybridrl.models.lora import LoraSpec, adapters_disabled, save_adapter_config, with_adapters
from hybridrl.protocol import Batch
from hybridrl.workers.context import EngineRole, build_engine
from hybridrl.workers.forward import MicroBatching, forward_rows, ppo_update, response_log_probs
from hybridrl.workers.ref import ref_log_probs

logger = logging.getLogger(__name__)


class ActorRolloutRole(EngineRole):
    def __init__(
        self,
        model: ModelConfig,
        actor: ActorConfig,
        rollout: RolloutConfig,
        ctx: WorkerContext,
        *,
        max_response_length: int,
        max_prompt_length: int,
        total_steps: int = 1,
        seed: int = 0,
        separate_rollout: bool = False,
        ref: RefConfig | None = None,
    ) -> None:
        """``total_steps``: the run's training steps, the learning-rate schedule's length.
        ``separate_rollout``: generation-only workers on a pool of their own generate, not these. ``ref``:
        the reference's section where these workers compute its log-probs (LoRA's base model)."""
        self.ctx = ctx
        self.ref_cfg = ref
        self.actor_cfg = actor
        self.rollout_cfg = rollout
        # Built empty and filled shard by shard: no rank holds the whole fp32 model.
        dtype = weights_dtype(actor.fsdp.model_dtype, trained=True, device=ctx.device)
        empty, weights = empty_causal_lm(
            ctx.model_path,
            model.trust_remote_code,
            dtype,
            attention_implementation(model.use_remove_padding),
        )
        spec = LoraSpec.from_keys(model.lora_rank, model.lora_alpha, model.target_modules, model.exclude_modules)
        self.lora = spec
        if spec is not None:  # adapters only are trained; they start from the same values on every rank
            weights = with_adapters(empty, spec, weights, seed)
        if model.enable_gradient_checkpointing:
            enable_activation_checkpointing(empty)
        self.engine, self.offload = build_engine(
            empty,
            weights,
            actor,
            ctx,
            train=True,
            what="actor",
            param_offload=actor.fsdp.param_offload,
            optimizer_offload=actor.fsdp.optimizer_offload,
            remove_padding=model.use_remove_padding,
            fused_kernels=model.use_fused_kernels and actor.strategy != Strategy.megatron,  # a split head: logits
            total_steps=total_steps,
            sequence_parallel=actor.ulysses_sequence_parallel_size,
        )
        self.rollout_dtype = rollout_dtype(rollout.dtype, actor.precision, ctx.device)
        # Generation on these workers (the hybrid engine), unless a rollout pool of its own generates
        # (``separate_rollout``): then the actor's first rank streams each update's weights to it.
        self.generation: Generation | None = None
        self.rollout: RolloutEngine | None = None
        if separate_rollout:
            # ``export_skeleton`` (parameters on the meta device) names the weights for exports.
            self.tokenizer = load_tokenizer(ctx.tokenizer_path, model.trust_remote_code)
            self.export_skeleton, _ = empty_causal_lm(ctx.model_path, model.trust_remote_code, self.rollout_dtype)
        else:
            self.generation = Generation(
                model,
                rollout,
                ctx,
                dtype=self.rollout_dtype,
                max_prompt_length=max_prompt_length,
                max_response_length=max_response_length,
                seed=seed,
            )
            # One tokenizer and one meta skeleton per worker: the generation side's.
            self.tokenizer, self.export_skeleton = self.generation.tokenizer, self.generation.skeleton
            self.rollout = self.generation.engine
        self.weights = WeightSender(self.engine, self.rollout_dtype, self.offload, ctx.recorder.span, self.rollout)
        if self.rollout is not None:
            self.weights.hand_over()
            self.rollout.release()
        self.offload.offload()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> ActorRolloutRole:
        arr = cfg.actor_rollout_ref
        return cls(
            arr.model,
            arr.actor,
            arr.rollout,
            ctx,
            max_response_length=cfg.data.max_response_length,
            max_prompt_length=cfg.data.max_prompt_length,
            total_steps=cfg.trainer.total_steps,
            seed=cfg.trainer.seed,
            separate_rollout="rollout" in active_roles(cfg),
            ref=arr.ref if ref_in_actor(cfg) else None,
        )

    # -- rollout -------------------------------------------------------------------------------
    def generate(self, batch: Batch) -> Batch:
        if self.generation is None:
            raise RuntimeError("The actor's workers do not generate: resource_pool.mapping.rollout has its own pool.")
        self.weights.hand_over()  # skipped when generation holds these weights (validation, extra rounds)
        self.generation.engine.resume()
        try:
            return self.generation.generate(batch)
        finally:
            self.generation.engine.release()

    def rollout_log_probs_exact(self) -> bool:
        """Whether the generation engine's log-probs of its samples are the trainer's up to float rounding,
        so that they can stand in for the old-log-prob pass: Hugging Face ``generate`` on the same weights
        in fp32, trained in fp32 (no autocast), where the rollouts are scored at the sampling temperature.
        A rollout pool of its own builds its engine by the same rules (``RolloutRole``)."""
        return (
            self.rollout_cfg.name == "hf"
            and self.rollout_dtype == torch.float32
            and self.actor_cfg.precision == Precision.fp32
            and all(p.dtype == torch.float32 for p in self.engine.model.parameters())
        )

    # -- the hand-over to a rollout pool of its own ---------------------------------------------
    def open_weight_channel(self, plan: ChannelPlan) -> None:
        """The first ``plan.senders`` ranks send to the rollout workers (the first hosts the channel's store);
        the others gather the weights with them but do not send."""
        if self.ctx.rank < plan.senders:
            self.weights.open(open_channel(self.ctx, plan, self.ctx.rank))

    def send_weights(self) -> int:
        """Every rank gathers each full tensor in turn; the sending ranks send their shares to the rollout
        workers (``RolloutRole.receive_weights``), or empty streams when they hold these weights. The bytes
        this rank sent."""
        return self.weights.hand_over()

    # -- data layout ---------------------------------------------------------------------------
    def dp_layout(self, method: str) -> DataLayout:
        """Generation follows the generation replicas (``Generation.layout``); training and log-probs the
        training engine's layout."""
        if method == "generate" and self.generation is not None:
            return self.generation.layout()
        return super().dp_layout(method)

    # -- evaluation ----------------------------------------------------------------------------
    def compute_log_prob(self, batch: Batch) -> Batch | None:
        cfg = self.rollout_cfg
        how = MicroBatching(
            cfg.log_prob_micro_batch_size_per_gpu,
            cfg.log_prob_max_token_len_per_gpu if cfg.log_prob_use_dynamic_bsz else None,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        )

        scoring = TokenScoring(cfg.temperature, with_entropy=True, entropy_grad=False)

        def head(logits: ModelOutput, mb: Batch) -> tuple[torch.Tensor, torch.Tensor]:
            log_probs, entropy = response_log_probs(logits, mb, scoring)
            assert entropy is not None
            return log_probs, entropy

        with self.offload.resident():
            out = forward_rows(self.engine, batch, how, head, scoring)
        if out is None:  # an early pipeline stage: the last stage holds the result
            return None
        return Batch.from_dict(tensors={"old_log_probs": out[0], "old_entropy": out[1]})

    def compute_ref_log_prob(self, batch: Batch) -> Batch | None:
        """The reference policy's log-probs where it is this actor's base model (LoRA, ``ref_in_actor``):
        the same forward with every adapter off, micro-batched as the reference's section says."""
        if self.ref_cfg is None:
            raise RuntimeError("The actor computes reference log-probs only with LoRA (model.lora_rank > 0).")
        with self.offload.resident(), adapters_disabled(self.engine.model):
            return ref_log_probs(self.engine, batch, self.ref_cfg, self.rollout_cfg.temperature)

    # -- update --------------------------------------------------------------------------------
    def update_actor(self, batch: Batch) -> dict[str, float]:
        cfg = self.actor_cfg
        policy_loss = get_policy_loss(cfg.policy_loss.loss_mode)
        clip_low = cfg.clip_ratio if cfg.clip_ratio_low is None else cfg.clip_ratio_low
        clip_high = cfg.clip_ratio if cfg.clip_ratio_high is None else cfg.clip_ratio_high

        scoring = TokenScoring(
            self.rollout_cfg.temperature,
            with_entropy=True,
            entropy_grad=cfg.entropy_coeff != 0,  # else a metric, without a graph
            checkpoint=cfg.entropy_checkpointing,
        )

        def micro_loss(logits: ModelOutput, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
            mask = mb.tensors["response_mask"].float()
            log_prob, entropy = response_log_probs(logits, mb, scoring)
            # Without old log-probs the update is exactly on-policy (the trainer skipped their pass):
            # they are this forward's own, detached.
            old_log_probs = mb.tensors.get("old_log_probs", None)
            pg = policy_loss(
                log_prob.detach() if old_log_probs is None else old_log_probs,
                log_prob,
                mb.tensors["advantages"],
                mask,
                clip_ratio_low=clip_low,
                clip_ratio_high=clip_high,
                clip_ratio_c=cfg.clip_ratio_c,
                loss_agg_mode=cfg.loss_agg_mode,
                is_weights=mb.tensors.get("rollout_is_weights", None),
            )
            assert entropy is not None
            entropy_loss = agg_loss(entropy, mask, cfg.loss_agg_mode)
            loss = pg["pg_loss"] - cfg.entropy_coeff * entropy_loss
            row = {
                "actor/pg_loss": float(pg["pg_loss"].detach()),
                "actor/pg_clipfrac": float(pg["pg_clipfrac"]),
                "actor/pg_clipfrac_lower": float(pg["pg_clipfrac_lower"]),
                "actor/ppo_kl": float(pg["ppo_kl"]),
                "actor/entropy": float(entropy_loss.detach()),
            }
            if cfg.use_kl_loss:
                kl = compute_kl_loss(log_prob, mb.tensors["ref_log_probs"], mask, cfg.kl_loss_type, cfg.loss_agg_mode)
                loss = loss + cfg.kl_loss_coef * kl
                row["actor/kl_loss"] = float(kl.detach())
                row["actor/kl_coef"] = cfg.kl_loss_coef
            return loss, row

        mini = cfg.ppo_mini_batch_size * self.rollout_cfg.n // self.engine.dp_size
        with self.offload.resident(optimizer=True):
            seed = int(batch.meta.get("seed", 0))
            return ppo_update(
                self.engine,
                batch,
                cfg,
                mini,
                seed,
                micro_loss,
                "actor",
                scoring,
                section=ROLE_SECTIONS["actor_rollout"],
            )

    # -- inspection and export -----------------------------------------------------------------
    def state_digest(self) -> dict[str, str]:
        with self.offload.resident():
            digest = {"train": self.engine.state_digest()}
            if self.rollout is not None:
                digest["rollout"] = self.rollout.weights_digest()
            return digest

    def save_hf_metadata(self, out_dir: str) -> None:
        """Config, generation config and tokenizer: what an export needs besides the weights."""
        self._save_hf_files(out_dir)
        if self.lora is not None:  # how ``hybridrl export`` merges the adapters, or publishes them
            save_adapter_config(self.engine.model, self.lora, out_dir)

    def _save_hf_files(self, out_dir: str) -> None:
        config_for_export(self.export_skeleton.config).save_pretrained(out_dir)
        self.export_skeleton.generation_config.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)

    def save_hf(self, out_dir: str, max_shard_bytes: int) -> str | None:
        """Write the actor as a Hugging Face directory, every rank writing its share of the weights: they
        stream to every rank one tensor at a time and each keeps only those it writes
        (``checkpoint.hf_files``), so no rank holds the whole model. The training weights (fp32 masters),
        not the generation copy, which may be bf16; a LoRA actor's merged."""
        writer = ShardedWeightsWriter(Path(out_dir), self.ctx.rank, self.ctx.world_size, max_shard_bytes)
        with self.offload.resident():
            for name, tensor in self.engine.iter_full_weights():
                writer.add(name, tensor)
        writer.finish()
        if self.ctx.rank != 0:
            return None
        self._save_hf_files(out_dir)
        return out_dir
