"""The roles: what every trained role has (actor, critic), the actor's policy loss, the reference policy, and the
actor_rollout_ref section that groups the policy's model with its actor, rollout and reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from hybridrl.config.choices import KLPenalty, Precision, Strategy
from hybridrl.config.schema.engine import FSDPConfig, OptimConfig, ParallelConfig
from hybridrl.config.schema.fields import at_least, doc, finite, positive, section, values_of
from hybridrl.config.schema.model import CriticModelConfig, ModelConfig
from hybridrl.config.schema.rollout import RolloutConfig


@dataclass(frozen=True)
class PolicyLossConfig:
    loss_mode: str = doc(
        "vanilla",
        "vanilla (token-level PPO ratio) | gspo (sequence-level ratio, Zheng et al. 2025) | cispo (clipped, "
        "detached importance weights, MiniMax 2025) | geo_mean (GMPO: geometric mean of token ratios, Zhao et al. 2025)",
    )


@dataclass(frozen=True)
class TrainedRoleConfig:
    """What every trained role (actor, critic) has: its engine, optimizer, batching and precision."""

    strategy: Strategy = doc(
        Strategy.fsdp,
        "training engine: fsdp (FSDP2) | megatron (tensor/sequence/pipeline parallel, DTensor + pipelining)",
    )
    fsdp: FSDPConfig = section(FSDPConfig)
    parallel_config: ParallelConfig = section(ParallelConfig)
    optim: OptimConfig = section(OptimConfig)
    ppo_mini_batch_size: int = doc(16, "prompts per optimizer step (x rollout.n sequences, split over workers)")
    ppo_micro_batch_size_per_gpu: int = doc(4, "sequences per forward/backward on one worker (gradient accumulation)")
    use_dynamic_bsz: bool = doc(
        False, "micro-batches filled up to ppo_max_token_len_per_gpu real tokens instead of a row count"
    )
    ppo_max_token_len_per_gpu: int = doc(16384, "use_dynamic_bsz: tokens per forward/backward on one worker")
    ppo_epochs: int = doc(1, "passes over each step's rollouts")
    shuffle: bool = doc(False, "shuffle sequences between PPO epochs")
    use_prefix_grouper: bool = doc(
        True,
        "rows of a micro-batch that share a prompt run it through the model once (GRPO's n samples), in every "
        "forward and backward of this role (the actor's also for the reference model); not with "
        "use_remove_padding, activation checkpointing or the megatron strategy",
    )
    ulysses_sequence_parallel_size: int = doc(
        1,
        "Ulysses sequence parallelism (fsdp, with use_remove_padding): each sequence is split over this many "
        "workers, which exchange heads for tokens around attention; data-parallel replicas = workers / this",
    )
    grad_clip: float = doc(1.0, "max global gradient norm")
    loss_agg_mode: str = doc("token-mean", "how token losses become one number (token-mean, seq-mean-token-sum, ...)")
    precision: Precision = doc(Precision.fp32, "fp32 | bf16 (autocast) | fp16 (autocast + dynamic loss scaling)")
    gradient_scale: float = doc(
        512.0,
        "fp16: initial loss scale (halved on overflow, the step skipped; doubled after 200 clean steps)",
    )

    def problems(self, at: str) -> list[str]:
        """``at``: the role's path (the actor's or the critic's), which its optimizer's messages extend."""
        return positive(
            at,
            **values_of(
                self,
                "ppo_mini_batch_size ppo_micro_batch_size_per_gpu ppo_epochs grad_clip ulysses_sequence_parallel_size",
            ),
        ) + self.optim.problems(f"{at}.optim")


@dataclass(frozen=True)
class ActorConfig(TrainedRoleConfig):
    clip_ratio: float = doc(0.2, "PPO clip range of the probability ratio")
    clip_ratio_low: float | None = doc(None, "lower clip range (1 - low); null = clip_ratio")
    clip_ratio_high: float | None = doc(
        None, "upper clip range (1 + high); null = clip_ratio. DAPO's clip-higher: e.g. 0.28"
    )
    clip_ratio_c: float | None = doc(3.0, "dual-clip bound for negative advantages (Ye et al. 2020); null = off")
    policy_loss: PolicyLossConfig = section(PolicyLossConfig)
    use_kl_loss: bool = doc(False, "add kl_loss_coef * KL(policy || reference) to the actor loss (GRPO style)")
    kl_loss_coef: float = doc(0.001, "weight of the KL loss")
    kl_loss_type: KLPenalty = doc(KLPenalty.low_var_kl, "kl/k1, abs, mse/k2, low_var_kl/k3")
    entropy_coeff: float = doc(0.0, "weight of the entropy bonus in the actor loss")
    entropy_checkpointing: bool = doc(
        False, "recompute the per-chunk fp32 log-softmax and entropy in backward instead of keeping them"
    )

    def problems(self, at: str) -> list[str]:
        problems = super().problems(at) + finite(at, entropy_coeff=self.entropy_coeff)
        problems += at_least(0, at, " (0 = no KL term)", kl_loss_coef=self.kl_loss_coef)
        problems += positive(
            at, clip_ratio=self.clip_ratio, clip_ratio_low=self.clip_ratio_low, clip_ratio_high=self.clip_ratio_high
        )
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1:
            problems.append(f"{at}.clip_ratio_c={self.clip_ratio_c} must be > 1 (dual-clip bound), or null.")
        return problems


@dataclass(frozen=True)
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = doc(64, "sequences per forward of the frozen reference policy")
    log_prob_use_dynamic_bsz: bool = doc(False, "micro-batches of log_prob_max_token_len_per_gpu tokens")
    log_prob_max_token_len_per_gpu: int = doc(16384, "log_prob_use_dynamic_bsz: tokens per forward on one worker")
    param_offload: bool = doc(False, "GPU: keep the reference weights in host memory except during its forward")
    ulysses_sequence_parallel_size: int = doc(
        cast(int, "${actor_rollout_ref.actor.ulysses_sequence_parallel_size}"),
        "Ulysses sequence parallelism of the reference's forward (the actor's)",
    )

    def problems(self, at: str) -> list[str]:
        return positive(at, **values_of(self, "log_prob_micro_batch_size_per_gpu ulysses_sequence_parallel_size"))


@dataclass(frozen=True)
class ActorRolloutRefConfig:
    model: ModelConfig = section(ModelConfig)
    actor: ActorConfig = section(ActorConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    ref: RefConfig = section(RefConfig)

    def problems(self, at: str) -> list[str]:
        """Each part's own, and LoRA (a model key) against the actor's engine."""
        problems = [
            *self.model.problems(f"{at}.model"),
            *self.actor.problems(f"{at}.actor"),
            *self.rollout.problems(f"{at}.rollout"),
            *self.ref.problems(f"{at}.ref"),
        ]
        actor_sp, ref_sp = self.actor.ulysses_sequence_parallel_size, self.ref.ulysses_sequence_parallel_size
        if max(actor_sp, ref_sp) > 1:
            problems += _ulysses_problems(
                f"{at}.actor", f"{at}.model", self.actor.strategy, self.model.use_remove_padding
            )
        if self.model.lora_rank > 0 and ref_sp != actor_sp:
            problems.append(
                f"{at}.ref.ulysses_sequence_parallel_size={ref_sp} differs from the actor's ({actor_sp}): with "
                f"lora_rank > 0 the reference is the actor's model with its adapters off, so it runs on the "
                f"actor's layout; drop the ref's setting."
            )
        if self.model.lora_rank > 0 and self.actor.strategy == Strategy.megatron:
            problems.append(
                f"{at}.model.lora_rank={self.model.lora_rank} with actor.strategy=megatron: LoRA on tensor- and "
                f"pipeline-parallel layers is not supported yet; use {at}.actor.strategy=fsdp (adapters are sharded "
                f"with the base) or lora_rank=0."
            )
        return problems


def _ulysses_problems(at: str, model: str, strategy: Strategy, remove_padding: bool) -> list[str]:
    """What Ulysses sequence parallelism needs of the role at ``at`` (its model section at ``model``): the
    FSDP engine and packed rows (verl's rule too)."""
    problems = []
    if strategy != Strategy.fsdp:
        problems.append(
            f"{at}.ulysses_sequence_parallel_size > 1 needs {at}.strategy=fsdp (the megatron strategy splits the "
            f"sequence with parallel_config.megatron.sequence_parallel); set it to 1 or use fsdp."
        )
    if not remove_padding:
        problems.append(
            f"{at}.ulysses_sequence_parallel_size > 1 splits packed sequences: set {model}.use_remove_padding=true "
            f"(verl requires the same)."
        )
    return problems


#: The critic's keys whose default is the actor's value (``CriticConfig``'s interpolations).
CRITIC_FOLLOWS_ACTOR = ("ppo_mini_batch_size", "ppo_epochs")


@dataclass(frozen=True)
class CriticConfig(TrainedRoleConfig):
    # verl's critic follows the actor's batching unless told otherwise: a ported command sets only the actor's.
    ppo_mini_batch_size: int = doc(
        cast(int, "${actor_rollout_ref.actor.ppo_mini_batch_size}"), "prompts per critic optimizer step (the actor's)"
    )
    ppo_epochs: int = doc(
        cast(int, "${actor_rollout_ref.actor.ppo_epochs}"), "passes over each step's rollouts (the actor's)"
    )
    optim: OptimConfig = section(lambda: OptimConfig(lr=1.0e-5))  # type: ignore[arg-type]  # verl's critic lr
    enable: bool | None = doc(None, "null = when algorithm.adv_estimator needs values (gae); false = never")
    model: CriticModelConfig = section(CriticModelConfig)
    forward_micro_batch_size_per_gpu: int = doc(64, "sequences per forward when computing values")
    ppo_max_token_len_per_gpu: int = doc(32768, "use_dynamic_bsz: tokens per forward/backward on one worker")
    forward_max_token_len_per_gpu: int = doc(32768, "use_dynamic_bsz: tokens per forward when computing values")
    cliprange_value: float | None = doc(0.5, "value clipping around the old values; null = no clipping")

    def problems(self, at: str) -> list[str]:
        problems = super().problems(at) + positive(
            at, **values_of(self, "forward_micro_batch_size_per_gpu cliprange_value")
        )
        if self.ulysses_sequence_parallel_size > 1:
            problems += _ulysses_problems(at, f"{at}.model", self.strategy, self.model.use_remove_padding)
        return problems
