"""The reference policy: a frozen copy of the initial actor, for the KL term."""

from __future__ import annotations

from hybridrl.algorithms.token_logprobs import TokenScoring
from hybridrl.config.choices import Strategy
from hybridrl.config.schema import ActorConfig, Config, RefConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.context import WorkerContext
from hybridrl.engine.dtypes import weights_dtype
from hybridrl.models.loader import attention_implementation, empty_causal_lm
from hybridrl.protocol import Batch
from hybridrl.workers.context import EngineRole, build_engine
from hybridrl.workers.forward import MicroBatching, forward_rows, response_log_probs


class RefRole(EngineRole):
    def __init__(
        self,
        actor: ActorConfig,
        ref: RefConfig,
        ctx: WorkerContext,
        *,
        temperature: float,
        trust_remote_code: bool,
        remove_padding: bool = False,
        fused_kernels: bool = False,
    ) -> None:
        """Laid out as the actor (``actor``'s strategy and sharding), without an optimizer; its weights'
        dtype is the frozen roles' default unless ``actor.fsdp.model_dtype`` names one."""
        self.ctx = ctx
        self.ref_cfg = ref
        self.temperature = temperature
        dtype = weights_dtype(actor.fsdp.model_dtype, trained=False, device=ctx.device)
        model, weights = empty_causal_lm(
            ctx.model_path,
            trust_remote_code,
            dtype,
            attention_implementation(remove_padding),
        )
        self.engine, self.offload = build_engine(
            model,
            weights,
            actor,
            ctx,
            train=False,
            what="ref",
            param_offload=ref.param_offload,
            remove_padding=remove_padding,
            fused_kernels=fused_kernels,
            sequence_parallel=ref.ulysses_sequence_parallel_size,
        )
        self.offload.offload()

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> RefRole:
        arr = cfg.actor_rollout_ref
        return cls(
            arr.actor,
            arr.ref,
            ctx,
            temperature=arr.rollout.temperature,
            trust_remote_code=arr.model.trust_remote_code,
            remove_padding=arr.model.use_remove_padding,
            fused_kernels=arr.model.use_fused_kernels and arr.actor.strategy != Strategy.megatron,
        )

    def compute_ref_log_prob(self, batch: Batch) -> Batch | None:
        with self.offload.resident():
            return ref_log_probs(self.engine, batch, self.ref_cfg, self.temperature)


def ref_log_probs(engine: TrainEngine, batch: Batch, ref: RefConfig, temperature: float) -> Batch | None:
    """The reference policy's ``ref_log_probs`` of the responses, micro-batched as the ``ref`` section says:
    by the reference's own engine, or by a LoRA actor's with its adapters off. None on an early pipeline
    stage (the last stage holds the result)."""
    scoring = TokenScoring(temperature, with_entropy=False)
    micro = MicroBatching(
        ref.log_prob_micro_batch_size_per_gpu,
        ref.log_prob_max_token_len_per_gpu if ref.log_prob_use_dynamic_bsz else None,
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
    )
    out = forward_rows(engine, batch, micro, lambda logits, mb: (response_log_probs(logits, mb, scoring)[0],), scoring)
    return None if out is None else Batch.from_dict(tensors={"ref_log_probs": out[0]})
