"""What a trained role's engine is given: its parallel strategy (FSDP2, or the Megatron-style layout) and its
optimizer with the learning-rate schedule."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.choices import DType, LRSchedulerType, PipelineSchedule, ShardingStrategy
from hybridrl.config.schema.fields import doc, positive, section


@dataclass(frozen=True)
class FSDPConfig:
    sharding_strategy: ShardingStrategy = doc(
        ShardingStrategy.FULL_SHARD,
        "FULL_SHARD | SHARD_GRAD_OP (keep gathered) | NO_SHARD (replicate) | HYBRID_SHARD",
    )
    shard_group_size: int | None = doc(
        None, "HYBRID_SHARD: ranks per shard group (replicated across groups); null = ranks of one node"
    )
    mixed_precision: bool = doc(
        False, "low-precision parameters in compute (bf16, or fp16 with precision=fp16), fp32 reduction"
    )
    cpu_offload: bool = doc(
        False, "FSDP2's CPU offload: sharded parameters, gradients and optimizer step live on the CPU throughout"
    )
    param_offload: bool = doc(
        False, "GPU: move this role's parameters (and gradients) to host memory between the phases that use them"
    )
    optimizer_offload: bool = doc(False, "GPU: move the optimizer state to host memory outside the update phase")
    model_dtype: DType = doc(
        DType.auto,
        "dtype the weights are kept in: auto = float32 for trained roles (fp32 masters), bfloat16 for frozen "
        "ones (ref, reward model) on GPU and float32 on CPU",
    )
    limit_all_gathers: bool = doc(
        True, "true: one layer's all-gather in flight (FSDP2 default); false: prefetch two layers"
    )


@dataclass(frozen=True)
class MegatronConfig:
    tp_size: int = doc(1, "tensor-parallel ranks (must divide attention and key/value heads)")
    pp_size: int = doc(1, "pipeline stages (at most the number of layers)")
    sequence_parallel: bool = doc(False, "with tp_size > 1: shard norms and the residual stream along the sequence")
    pp_schedule: PipelineSchedule = doc(PipelineSchedule["1F1B"], "pipeline schedule: 1F1B | GPipe")
    pp_microbatches: int | None = doc(
        None, "micro-batches per pipeline pass; null = mini-batch / ppo_micro_batch_size_per_gpu"
    )


@dataclass(frozen=True)
class ParallelConfig:
    megatron: MegatronConfig = section(MegatronConfig, "used when strategy=megatron; workers = dp x tp_size x pp_size")


@dataclass(frozen=True)
class OptimConfig:
    lr: float = doc(1.0e-6, "AdamW learning rate (the schedule's base); the critic's default is 1e-5")
    betas: list[float] = doc([0.9, 0.999], "AdamW betas")
    weight_decay: float = doc(0.01, "AdamW weight decay")
    eps: float = doc(1.0e-8, "AdamW epsilon")
    lr_warmup_steps: int = doc(-1, "training steps of linear warm-up from 0; <= 0 = lr_warmup_steps_ratio decides")
    lr_warmup_steps_ratio: float = doc(0.0, "warm-up as a fraction of total_training_steps (when lr_warmup_steps <= 0)")
    lr_scheduler_type: LRSchedulerType = doc(
        LRSchedulerType.constant, "after warm-up: constant | cosine (decays to min_lr_ratio x lr)"
    )
    warmup_style: LRSchedulerType | None = doc(None, "verl's older name for lr_scheduler_type; wins when set")
    min_lr_ratio: float = doc(0.0, "cosine: the floor, as a fraction of lr")
    num_cycles: float = doc(0.5, "cosine: half-waves over the schedule (0.5 = one decay from lr to the floor)")
    total_training_steps: int = doc(-1, "the schedule's length; <= 0 = trainer.total_steps")

    def problems(self, at: str) -> list[str]:
        """What AdamW and the schedule would refuse only inside the workers, after the whole cluster started."""
        problems = positive(at, lr=self.lr)
        if not 0 <= self.lr_warmup_steps_ratio <= 1 or not 0 <= self.min_lr_ratio <= 1:
            problems.append(
                f"{at}.lr_warmup_steps_ratio={self.lr_warmup_steps_ratio} and {at}.min_lr_ratio={self.min_lr_ratio} "
                f"must lie in [0, 1]."
            )
        if not self.num_cycles > 0:
            problems.append(f"{at}.num_cycles={self.num_cycles} must be positive (0.5 = one cosine decay).")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            problems.append(f"{at}.betas={list(self.betas)} must be two numbers in [0, 1), e.g. [0.9, 0.999].")
        if self.eps < 0 or self.weight_decay < 0:
            problems.append(f"{at}.eps={self.eps} and {at}.weight_decay={self.weight_decay} must be >= 0.")
        return problems
