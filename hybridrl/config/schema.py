"""Typed schema of the training configuration.

The dataclasses give every key its type; the shipped YAML (``ppo_trainer.yaml``) gives every key its
default and its one-line documentation. Keeping defaults in one place (the YAML) means the schema
cannot drift from what users read. The loaded config is read-only: code derives values from it
(e.g. per-worker batch sizes in the workers) instead of writing them back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class TinyModelConfig:
    hidden_size: int = MISSING
    num_hidden_layers: int = MISSING
    num_attention_heads: int = MISSING
    num_key_value_heads: int = MISSING
    intermediate_size: int = MISSING
    seed: int = MISSING


@dataclass
class ModelConfig:
    path: str | None = MISSING
    tokenizer_path: str | None = MISSING
    trust_remote_code: bool = MISSING
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)


@dataclass
class CriticModelConfig:
    path: str | None = MISSING
    value_head_init_std: float = MISSING


@dataclass
class FSDPConfig:
    sharding_strategy: str = MISSING
    shard_group_size: int | None = MISSING
    mixed_precision: bool = MISSING
    cpu_offload: bool = MISSING
    limit_all_gathers: bool = MISSING


@dataclass
class MegatronConfig:
    tp_size: int = MISSING
    pp_size: int = MISSING
    sequence_parallel: bool = MISSING
    pp_schedule: str = MISSING
    pp_microbatches: int | None = MISSING


@dataclass
class ParallelConfig:
    megatron: MegatronConfig = field(default_factory=MegatronConfig)


@dataclass
class OptimConfig:
    lr: float = MISSING
    betas: list[float] = MISSING
    weight_decay: float = MISSING
    eps: float = MISSING


@dataclass
class PolicyLossConfig:
    loss_mode: str = MISSING


@dataclass
class TrainedRoleConfig:
    """What every trained role (actor, critic) has: its engine, optimizer, batching and precision."""

    strategy: str = MISSING
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo_mini_batch_size: int = MISSING
    ppo_micro_batch_size_per_gpu: int = MISSING
    ppo_epochs: int = MISSING
    shuffle: bool = MISSING
    grad_clip: float = MISSING
    loss_agg_mode: str = MISSING
    precision: str = MISSING
    gradient_scale: float = MISSING


@dataclass
class ActorConfig(TrainedRoleConfig):
    clip_ratio: float = MISSING
    clip_ratio_low: float | None = MISSING
    clip_ratio_high: float | None = MISSING
    clip_ratio_c: float | None = MISSING
    policy_loss: PolicyLossConfig = field(default_factory=lambda: PolicyLossConfig())
    use_kl_loss: bool = MISSING
    kl_loss_coef: float = MISSING
    kl_loss_type: str = MISSING
    entropy_coeff: float = MISSING


@dataclass
class ValKwargsConfig:
    n: int = MISSING
    do_sample: bool = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING


@dataclass
class RolloutConfig:
    name: str = MISSING
    n: int = MISSING
    do_sample: bool = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    log_prob_micro_batch_size_per_gpu: int = MISSING
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = MISSING


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


@dataclass
class CriticConfig(TrainedRoleConfig):
    enable: bool | None = MISSING
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    forward_micro_batch_size_per_gpu: int = MISSING
    cliprange_value: float | None = MISSING


@dataclass
class KLControlConfig:
    type: str = MISSING
    kl_coef: float = MISSING
    target_kl: float = MISSING
    horizon: int = MISSING


@dataclass
class FilterGroupsConfig:
    enable: bool = MISSING
    max_num_gen_batches: int = MISSING


@dataclass
class AlgorithmConfig:
    adv_estimator: str = MISSING
    norm_adv_by_std_in_grpo: bool = MISSING
    gamma: float = MISSING
    lam: float = MISSING
    use_kl_in_reward: bool = MISSING
    kl_penalty: str = MISSING
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=lambda: FilterGroupsConfig())


@dataclass
class DataConfig:
    train_files: Any | None = MISSING
    val_files: Any | None = MISSING
    prompt_key: str = MISSING
    filter_overlong_prompts: bool = MISSING
    truncation: str = MISSING
    task: str = MISSING
    task_kwargs: dict[str, Any] = MISSING
    train_size: int = MISSING
    val_size: int = MISSING
    train_batch_size: int = MISSING
    max_prompt_length: int = MISSING
    max_response_length: int = MISSING
    shuffle: bool = MISSING
    seed: int = MISSING


@dataclass
class RewardModelModelConfig:
    path: str | None = MISSING
    tokenizer_path: str | None = MISSING
    trust_remote_code: bool = MISSING


@dataclass
class RewardModelConfig:
    enable: bool = MISSING
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    precision: str = MISSING
    max_length: int = MISSING
    micro_batch_size_per_gpu: int = MISSING
    weight: float = MISSING
    use_rule_reward: bool = MISSING


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = MISSING
    name: str = MISSING


@dataclass
class RewardConfig:
    on_error: str = MISSING
    failure_score: float = MISSING


@dataclass
class ResourcePoolConfig:
    pools: dict[str, dict[str, Any]] = MISSING
    mapping: dict[str, str] = MISSING


@dataclass
class RayConfig:
    address: str | None = MISSING
    num_cpus: int | None = MISSING
    include_dashboard: bool = MISSING
    dashboard_host: str = MISSING
    env_vars: dict[str, str] = MISSING
    working_dir: str | None = MISSING
    object_store_memory: int | None = MISSING
    start_timeout_s: float = MISSING
    call_timeout_s: float = MISSING


@dataclass
class TrainerConfig:
    project_name: str = MISSING
    experiment_name: str = MISSING
    output_dir: str = MISSING
    total_steps: int = MISSING
    seed: int = MISSING
    device: str = MISSING
    logger: list[str] = MISSING
    progress_bar: bool = MISSING
    trace: bool = MISSING
    breakdown_interval: int = MISSING
    straggler_factor: float = MISSING
    straggler_min_seconds: float = MISSING
    cluster_stats_interval: int = MISSING
    save_hf: bool = MISSING
    test_freq: int = MISSING
    val_before_train: bool = MISSING
    val_generations_to_log: int = MISSING
    save_freq: int = MISSING
    max_ckpt_to_keep: int | None = MISSING
    resume_mode: str = MISSING
    resume_from_path: str | None = MISSING
    learning_check_window: int = MISSING
    ray: RayConfig = field(default_factory=RayConfig)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    resource_pool: ResourcePoolConfig = field(default_factory=ResourcePoolConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)


# Keys whose value must be one of a fixed set. Sets that grow by registration (advantage estimators,
# tasks, reward functions) are checked against their registries in ``validate``.
CHOICES: dict[str, tuple[str, ...]] = {
    "actor_rollout_ref.actor.strategy": ("fsdp", "megatron"),
    "critic.strategy": ("fsdp", "megatron"),
    "actor_rollout_ref.actor.parallel_config.megatron.pp_schedule": ("1F1B", "GPipe"),
    "critic.parallel_config.megatron.pp_schedule": ("1F1B", "GPipe"),
    "actor_rollout_ref.actor.fsdp.sharding_strategy": ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"),
    "critic.fsdp.sharding_strategy": ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"),
    "actor_rollout_ref.actor.precision": ("fp32", "bf16", "fp16"),
    "critic.precision": ("fp32", "bf16", "fp16"),
    "actor_rollout_ref.rollout.name": ("hf",),
    "algorithm.kl_ctrl.type": ("fixed", "adaptive"),
    "algorithm.kl_penalty": ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"),
    "actor_rollout_ref.actor.kl_loss_type": ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"),
    "trainer.device": ("auto", "cpu", "cuda"),
    "data.truncation": ("error", "left", "right"),
    "reward.on_error": ("raise", "fail"),
    "reward_model.precision": ("fp32", "bf16"),
    "reward_model.fsdp.sharding_strategy": ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"),
}

# Role names used in ``resource_pool.mapping``.
ROLES: tuple[str, ...] = ("actor_rollout", "critic", "ref", "reward_model")
TRACKERS: tuple[str, ...] = ("console", "jsonl", "tensorboard", "wandb", "mlflow")
