"""Single values out of their range: counts and timeouts that must be positive, rates in [0, 1], numbers that
must be finite. (Types and closed sets are the schema's; what needs another package, the cluster or the files
is ``hybridrl.preflight``'s.)"""

from __future__ import annotations

import math

from hybridrl.config.choices import Precision, Strategy
from hybridrl.config.errors import fail as _fail
from hybridrl.config.schema import Config, OptimConfig, TinyModelConfig


def check_ranges(cfg: Config) -> None:
    _check_positive(cfg)
    _check_schedules(cfg)
    for section, optim in (
        ("actor_rollout_ref.actor.optim", cfg.actor_rollout_ref.actor.optim),
        ("critic.optim", cfg.critic.optim),
    ):
        _check_optimizer(section, optim)
    _check_sampling(cfg)
    _check_losses(cfg)
    _check_rewards(cfg)
    _check_cluster(cfg)
    _check_lora(cfg)
    if cfg.actor_rollout_ref.model.path is None:
        _check_tiny_model(cfg.actor_rollout_ref.model.tiny)


def _check_positive(cfg: Config) -> None:
    """Counts, sizes, rates and timeouts that must be positive (or at least 0)."""
    actor, critic, rollout = cfg.actor_rollout_ref.actor, cfg.critic, cfg.actor_rollout_ref.rollout
    values = {
        "data.train_batch_size": cfg.data.train_batch_size,
        "data.train_size": cfg.data.train_size,
        "data.max_prompt_length": cfg.data.max_prompt_length,
        "data.max_response_length": cfg.data.max_response_length,
        "trainer.total_steps": cfg.trainer.total_steps,
        "actor_rollout_ref.rollout.n": rollout.n,
        "actor_rollout_ref.actor.ppo_mini_batch_size": actor.ppo_mini_batch_size,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": actor.ppo_micro_batch_size_per_gpu,
        "actor_rollout_ref.actor.ppo_epochs": actor.ppo_epochs,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": rollout.log_prob_micro_batch_size_per_gpu,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
        "critic.ppo_mini_batch_size": critic.ppo_mini_batch_size,
        "critic.ppo_micro_batch_size_per_gpu": critic.ppo_micro_batch_size_per_gpu,
        "critic.ppo_epochs": critic.ppo_epochs,
        "critic.forward_micro_batch_size_per_gpu": critic.forward_micro_batch_size_per_gpu,
        "trainer.learning_check_window": cfg.trainer.learning_check_window,
        "actor_rollout_ref.actor.optim.lr": actor.optim.lr,
        "critic.optim.lr": critic.optim.lr,
        "trainer.ray.connect_timeout_s": cfg.trainer.ray.connect_timeout_s,
        "trainer.ray.start_timeout_s": cfg.trainer.ray.start_timeout_s,
        "trainer.ray.call_timeout_s": cfg.trainer.ray.call_timeout_s,
        "trainer.total_epochs": cfg.trainer.total_epochs or 1,
        "trainer.total_training_steps": cfg.trainer.total_training_steps or 1,
        "trainer.n_gpus_per_node": cfg.trainer.n_gpus_per_node or 1,
        "trainer.nnodes": cfg.trainer.nnodes or 1,
    }
    for key, value in values.items():
        if value <= 0:
            _fail(f"{key}={value} must be positive.")
    if cfg.trainer.save_freq == 0 or cfg.trainer.save_freq < -1:
        _fail(f"trainer.save_freq={cfg.trainer.save_freq}: use a positive number of steps, or -1 for no checkpoints.")
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        _fail("trainer.resume_mode=resume_path needs trainer.resume_from_path=<checkpoint dir>.")
    if cfg.trainer.straggler_factor <= 1:
        _fail(f"trainer.straggler_factor={cfg.trainer.straggler_factor} must be > 1 (a multiple of the median).")
    for key, value in (
        ("breakdown_interval", cfg.trainer.breakdown_interval),
        ("cluster_stats_interval", cfg.trainer.cluster_stats_interval),
        ("max_restarts", cfg.trainer.max_restarts),
        ("critic_warmup", cfg.trainer.critic_warmup),
        ("ray.liveness_timeout_s", cfg.trainer.ray.liveness_timeout_s),
    ):
        if value < 0:
            _fail(f"trainer.{key}={value} must be >= 0.")
    if not 0 <= cfg.algorithm.gamma <= 1 or not 0 <= cfg.algorithm.lam <= 1:
        _fail(f"algorithm.gamma={cfg.algorithm.gamma} and algorithm.lam={cfg.algorithm.lam} must lie in [0, 1].")
    if cfg.actor_rollout_ref.rollout.temperature <= 0:
        _fail("actor_rollout_ref.rollout.temperature must be > 0 (use do_sample=false for greedy).")
    gen_batches = cfg.algorithm.filter_groups.max_num_gen_batches
    if gen_batches < 1:
        _fail(f"algorithm.filter_groups.max_num_gen_batches ({gen_batches}) must be >= 1.")
    if cfg.trainer.test_freq == 0 or cfg.trainer.test_freq < -1:
        _fail(f"trainer.test_freq={cfg.trainer.test_freq}: use a positive number of steps, or -1 for no validation.")
    if cfg.actor_rollout_ref.rollout.val_kwargs.n < 1:
        _fail(f"actor_rollout_ref.rollout.val_kwargs.n={cfg.actor_rollout_ref.rollout.val_kwargs.n} must be >= 1.")
    if cfg.trainer.val_generations_to_log < 0:
        _fail("trainer.val_generations_to_log must be >= 0.")


def _check_schedules(cfg: Config) -> None:
    for section, optim in (
        ("actor_rollout_ref.actor.optim", cfg.actor_rollout_ref.actor.optim),
        ("critic.optim", cfg.critic.optim),
    ):
        if not 0 <= optim.lr_warmup_steps_ratio <= 1 or not 0 <= optim.min_lr_ratio <= 1:
            _fail(
                f"{section}.lr_warmup_steps_ratio={optim.lr_warmup_steps_ratio} and {section}.min_lr_ratio="
                f"{optim.min_lr_ratio} must lie in [0, 1]."
            )
        if optim.num_cycles <= 0:
            _fail(f"{section}.num_cycles={optim.num_cycles} must be positive (0.5 = one cosine decay).")


def _check_optimizer(section: str, optim: OptimConfig) -> None:
    """What AdamW would refuse only inside the workers, after the whole cluster started."""
    if len(optim.betas) != 2 or not all(0 <= b < 1 for b in optim.betas):
        _fail(f"{section}.betas={list(optim.betas)} must be two numbers in [0, 1), e.g. [0.9, 0.999].")
    if optim.eps < 0 or optim.weight_decay < 0:
        _fail(f"{section}.eps={optim.eps} and {section}.weight_decay={optim.weight_decay} must be >= 0.")


def _check_sampling(cfg: Config) -> None:
    rollout = cfg.actor_rollout_ref.rollout
    if not 0 < rollout.gpu_memory_utilization <= 1:
        _fail(f"actor_rollout_ref.rollout.gpu_memory_utilization={rollout.gpu_memory_utilization} must lie in (0, 1].")
    for section, sampling in (
        ("actor_rollout_ref.rollout", rollout.sampling()),
        ("actor_rollout_ref.rollout.val_kwargs", rollout.val_kwargs.sampling()),
    ):
        if not 0 < sampling.top_p <= 1:
            _fail(f"{section}.top_p={sampling.top_p} must lie in (0, 1]; 1.0 = off.")
        if sampling.top_k < -1:
            _fail(f"{section}.top_k={sampling.top_k} must be >= 0 (0 or -1 = off).")
        if sampling.do_sample and not sampling.temperature > 0:
            _fail(f"{section}.temperature={sampling.temperature} must be > 0 (use do_sample=false for greedy).")


def _check_lora(cfg: Config) -> None:
    model, actor = cfg.actor_rollout_ref.model, cfg.actor_rollout_ref.actor
    if model.lora_rank < 0:
        _fail(f"actor_rollout_ref.model.lora_rank={model.lora_rank} must be >= 0 (0 = no LoRA).")
    if model.lora_rank == 0:
        return
    if model.lora_alpha <= 0:
        _fail(
            f"actor_rollout_ref.model.lora_alpha={model.lora_alpha} must be > 0 (the update is scaled by alpha/rank)."
        )
    if actor.strategy == Strategy.megatron:
        _fail(
            f"actor_rollout_ref.model.lora_rank={model.lora_rank} with actor.strategy=megatron: LoRA on tensor- and "
            f"pipeline-parallel layers is not supported yet; use actor_rollout_ref.actor.strategy=fsdp (adapters "
            f"are sharded with the base) or lora_rank=0."
        )


def _check_losses(cfg: Config) -> None:
    actor, algo = cfg.actor_rollout_ref.actor, cfg.algorithm
    finite = {
        "actor_rollout_ref.actor.entropy_coeff": actor.entropy_coeff,
        "reward.failure_score": cfg.reward.failure_score,
        "reward_model.weight": cfg.reward_model.weight,
    }
    for key, value in finite.items():
        if not math.isfinite(value):
            _fail(f"{key}={value} must be a finite number.")
    positive = {
        "actor_rollout_ref.actor.grad_clip": actor.grad_clip,
        "critic.grad_clip": cfg.critic.grad_clip,
        "algorithm.kl_ctrl.horizon": algo.kl_ctrl.horizon,
        "algorithm.kl_ctrl.target_kl": algo.kl_ctrl.target_kl,
        "critic.cliprange_value": cfg.critic.cliprange_value if cfg.critic.cliprange_value is not None else 1.0,
    }
    for key, value in positive.items():
        if not value > 0:
            _fail(f"{key}={value} must be positive.")
    for key, value in (
        ("actor_rollout_ref.actor.kl_loss_coef", actor.kl_loss_coef),
        ("algorithm.kl_ctrl.kl_coef", algo.kl_ctrl.kl_coef),
    ):
        if not value >= 0:
            _fail(f"{key}={value} must be >= 0 (0 = no KL term).")
    for key, ratio in (
        ("clip_ratio", actor.clip_ratio),
        ("clip_ratio_low", actor.clip_ratio_low),
        ("clip_ratio_high", actor.clip_ratio_high),
    ):
        if ratio is not None and ratio <= 0:
            _fail(f"actor_rollout_ref.actor.{key}={ratio} must be positive.")
    if actor.clip_ratio_c is not None and actor.clip_ratio_c <= 1:
        _fail(f"actor_rollout_ref.actor.clip_ratio_c={actor.clip_ratio_c} must be > 1 (dual-clip bound), or null.")


def _check_rewards(cfg: Config) -> None:
    if cfg.data.reward_fn_key not in ("data_source", "ability"):
        _fail(
            f"data.reward_fn_key={cfg.data.reward_fn_key!r}: the reward function is picked by data_source or ability "
            f"(the columns hybridrl keeps from the data); other columns are not supported yet."
        )
    buffer, max_length = cfg.reward_model.overlong_buffer, cfg.data.max_response_length
    if buffer.enable and not 0 < buffer.len <= max_length:
        _fail(
            f"reward_model.overlong_buffer.len={buffer.len} must lie in (0, data.max_response_length={max_length}] "
            f"when overlong_buffer.enable=true."
        )
    if buffer.enable and cfg.reward_model.reward_manager != "dapo":
        _fail("reward_model.overlong_buffer.enable=true needs reward_model.reward_manager=dapo (as in verl).")
    if cfg.reward_model.precision == Precision.fp16:
        _fail("reward_model.precision=fp16 is not supported (no loss scaling for a frozen model); use fp32 or bf16.")
    if cfg.reward.num_workers < 0 or cfg.reward.timeout_s <= 0:
        _fail(
            f"reward.num_workers={cfg.reward.num_workers} must be >= 0 (0 = score in the driver) and "
            f"reward.timeout_s={cfg.reward.timeout_s} > 0."
        )


def _check_cluster(cfg: Config) -> None:
    trainer, ray = cfg.trainer, cfg.trainer.ray
    if trainer.straggler_min_seconds < 0:
        _fail(f"trainer.straggler_min_seconds={trainer.straggler_min_seconds} must be >= 0.")
    if trainer.max_ckpt_to_keep is not None and trainer.max_ckpt_to_keep < 1:
        _fail(f"trainer.max_ckpt_to_keep={trainer.max_ckpt_to_keep} must be >= 1, or null to keep every checkpoint.")
    if ray.num_cpus is not None and ray.num_cpus < 1:
        _fail(f"trainer.ray.num_cpus={ray.num_cpus} must be >= 1, or null (enough for every worker).")
    if ray.object_store_memory is not None and ray.object_store_memory < 78 * 2**20:
        _fail(
            f"trainer.ray.object_store_memory={ray.object_store_memory} bytes is below Ray's minimum (78 MiB); "
            f"give more, or null for Ray's default."
        )
    if not ray.dashboard_host or any(c.isspace() for c in ray.dashboard_host):
        _fail(f"trainer.ray.dashboard_host={ray.dashboard_host!r} is not a host address (e.g. 127.0.0.1).")


def _check_tiny_model(tiny: TinyModelConfig) -> None:
    """The built-in model's shape: every size positive, the heads dividing the width and each other."""
    sizes = {
        "hidden_size": tiny.hidden_size,
        "num_hidden_layers": tiny.num_hidden_layers,
        "num_attention_heads": tiny.num_attention_heads,
        "num_key_value_heads": tiny.num_key_value_heads,
        "intermediate_size": tiny.intermediate_size,
    }
    for key, value in sizes.items():
        if value < 1:
            _fail(f"actor_rollout_ref.model.tiny.{key}={value} must be >= 1.")
    if tiny.hidden_size % tiny.num_attention_heads or (tiny.hidden_size // tiny.num_attention_heads) % 2:
        _fail(
            f"actor_rollout_ref.model.tiny.num_attention_heads={tiny.num_attention_heads} must divide hidden_size="
            f"{tiny.hidden_size} into heads of an even width (rotary embeddings)."
        )
    if tiny.num_attention_heads % tiny.num_key_value_heads:
        _fail(
            f"actor_rollout_ref.model.tiny.num_key_value_heads={tiny.num_key_value_heads} must divide "
            f"num_attention_heads={tiny.num_attention_heads}."
        )
