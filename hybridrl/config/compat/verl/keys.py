"""verl's configuration keys, and what hybridrl does with each one it does not take under the same name.

verl users bring command lines and YAML files written for verl's ``ppo_trainer.yaml``. Every leaf key of
that file either works here with verl's meaning (hybridrl's schema has it under the same name) or has a
rule below. A rule is one of three kinds, told by its one-line answer:

- ``use X``: with a rename in ``RENAMES``, verl's spelling of hybridrl's key X: the value moves there
  (through a value map where the spellings differ). Without one, X differs in meaning (a per-worker
  count, a shared setting), so the key is taken only at its off value (below) and otherwise refused.
- ``not supported yet: ...``: a feature hybridrl does not have. The key is accepted at its off value,
  verl's default or null/false (``critic.model.lora_rank=0``, ``use_torch_compile=false``), which leaves the
  feature off in verl too; any other value is refused with the answer.
- ``not needed in hybridrl: ...``: a key with no job here by design (``_target_``, ``use_legacy_worker_impl``);
  accepted whatever its value, and logged once.

``VERL_KEYS`` and ``VERL_DEFAULTS`` are the key list and defaults of ``VERL_RELEASE``, read from the data
file ``defaults.yaml`` beside this module (its ``# release:`` line names the release);
``tests/config/test_verl_keys.py`` checks that every key is covered and every rule used. docs/CONFIG.md
("Coming from verl") shows the rules as a table.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

__all__ = [
    "RENAMES",
    "SCRIPT_DEFAULTS",
    "SCRIPT_KEYS",
    "SHARED",
    "VERL_ANSWERS",
    "VERL_DEFAULTS",
    "VERL_KEYS",
    "VERL_RELEASE",
    "Outcome",
    "RuleKind",
    "VerlRule",
    "verl_answer",
    "verl_rule",
]

_RELEASE_LINE = "# release:"


def _read_defaults() -> tuple[str, dict[str, Any]]:
    """The release named in ``defaults.yaml`` and its keys with verl's default values, in file order."""
    text = resources.files("hybridrl.config.compat.verl").joinpath("defaults.yaml").read_text(encoding="utf-8")
    release = next(line[len(_RELEASE_LINE) :].strip() for line in text.splitlines() if line.startswith(_RELEASE_LINE))
    return release, dict(yaml.safe_load(text))


VERL_RELEASE, VERL_DEFAULTS = _read_defaults()
VERL_KEYS: tuple[str, ...] = tuple(VERL_DEFAULTS)
# Keys verl's example scripts set that its ppo_trainer.yaml lacks: its ppo_megatron_trainer.yaml's layout
# keys and the ``+key=value`` additions of the DAPO recipes (verl's defaults: off).
SCRIPT_DEFAULTS: dict[str, Any] = {
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 1,
    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size": None,
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": 1,
    "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": 1,
    "critic.megatron.tensor_model_parallel_size": 1,
    "critic.megatron.pipeline_model_parallel_size": 1,
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": False,
    "reward_model.reward_kwargs.overlong_buffer_cfg.len": 0,
    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor": 1.0,
    "reward_model.reward_kwargs.overlong_buffer_cfg.log": False,
    "reward_model.reward_kwargs.max_resp_len": None,
    "actor_rollout_ref.model.torch_dtype": None,
}
SCRIPT_KEYS: tuple[str, ...] = tuple(SCRIPT_DEFAULTS)

# Answers shared by several rules.
_TARGET = "not needed in hybridrl: hydra's class path (the sections are typed dataclasses)"
_PROFILER = "not supported yet: nsys/npu/torch profilers (trainer.trace writes a timeline of every phase)"
_ULYSSES = "not supported yet: Ulysses sequence parallelism for the reward model (actor, ref and critic have it)"
_COMPILE = "not supported yet: torch.compile of the log-prob and entropy code"
_CHUNKING = "not needed in hybridrl: log-probs and entropy are always computed from the logits in chunks"
_LORA = "not supported yet: LoRA adapters on the critic (the actor's actor_rollout_ref.model.lora_rank is)"
_SHM = "not needed in hybridrl: models load straight from a local directory (no shared-memory copy)"
_EXTERNAL_LIB = "not supported yet: importing a package that registers custom model classes"
_OVERRIDE_CONFIG = "not supported yet: overriding the model's Hugging Face config"
_ACTIVATION_OFFLOAD = "not supported yet: offloading activations to CPU memory"
_TILED_MLP = "not supported yet: TiledMLP (the MLP computed in tiles to cut peak memory)"
_OPTIMIZER = "not supported yet: choosing the optimizer (always torch.optim.AdamW)"
_OPTIMIZER_KWARGS = "not supported yet: extra optimizer keyword arguments"
_CHECKPOINT = "not needed in hybridrl: a checkpoint always holds model, optimizer and extra state (HF: trainer.save_hf)"
_ASYNC_SAVE = "not supported yet: writing checkpoints in the background"
_WRAP_POLICY = "not supported yet: FSDP units by parameter count (each decoder layer is one unit)"
_ORIG_PARAMS = "not needed in hybridrl: an FSDP1 flag; FSDP2 always keeps the original parameters"
_DETERMINISM = "not supported yet: fully deterministic kernels for debugging"
_FORWARD_ONLY = "not needed in hybridrl: set internally for the forward-only roles"
_SEED = "use trainer.seed, which seeds every worker"
_LOADER_SEED = "use trainer.seed, which also seeds the mini-batch shuffle"
_ROLLOUT_N = "use actor_rollout_ref.rollout.n, which verl's key only mirrors"
_ROUTER_REPLAY = "not supported yet: MoE router replay"
_NO_GRADIENTS = "not needed in hybridrl: the reference runs without gradients"
_REWARD_MANAGER = "use reward_model.reward_manager (naive, batch, prime or dapo); a reward manager class of your own is not supported yet"
_REWARD_LOOP = "not supported yet: a custom reward-loop class"
_MULTI_MODAL = "not supported yet: multi-modal (image and video) data"
_CLIP_COV = "not supported yet: the clip-cov policy loss"
_KL_COV = "not supported yet: the kl-cov policy loss"
_SAPO = "not supported yet: SAPO's soft gate (policy_loss.loss_mode=sapo)"
_SUM_PI_SQUARED = "not supported yet: the sum of squared token probabilities (optimal token baseline)"
_REJECTION = "not supported yet: rejecting samples by their rollout-vs-trainer gap (rollout_is weighs them)"
_SKIP_ROLLOUT = "not supported yet: caching rollouts on disk and replaying them"
_QUANTIZATION = "not supported yet: quantized (fp8, torchao) rollout weights"

# (pattern, answer), first match wins. A pattern is a dotted key, or ``prefix.*``: that key and everything
# under it (also used for verl's dict-valued keys, whose sub-keys users set with +key.sub=value).
VERL_ANSWERS: tuple[tuple[str, str], ...] = (
    # -- actor_rollout_ref.actor
    ("actor_rollout_ref.actor._target_", _TARGET),
    ("actor_rollout_ref.actor.optim._target_", _TARGET),
    ("actor_rollout_ref.actor.optim.optimizer", _OPTIMIZER),
    ("actor_rollout_ref.actor.optim.optimizer_impl", _OPTIMIZER),
    ("actor_rollout_ref.actor.optim.clip_grad", "use actor_rollout_ref.actor.grad_clip"),
    ("actor_rollout_ref.actor.optim.override_optimizer_config.*", _OPTIMIZER_KWARGS),
    ("actor_rollout_ref.actor.fsdp_config._target_", _TARGET),
    ("actor_rollout_ref.actor.fsdp_config.wrap_policy.*", _WRAP_POLICY),
    ("actor_rollout_ref.actor.fsdp_config.param_offload", "use actor_rollout_ref.actor.fsdp.param_offload"),
    ("actor_rollout_ref.actor.fsdp_config.optimizer_offload", "use actor_rollout_ref.actor.fsdp.optimizer_offload"),
    (
        "actor_rollout_ref.actor.fsdp_config.offload_policy",
        "use actor_rollout_ref.actor.fsdp.cpu_offload, which is FSDP2's CPUOffloadPolicy",
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.reshard_after_forward",
        "use actor_rollout_ref.actor.fsdp.sharding_strategy, where SHARD_GRAD_OP = reshard_after_forward=false",
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.fsdp_size",
        "use actor_rollout_ref.actor.fsdp.shard_group_size, with sharding_strategy=HYBRID_SHARD",
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.forward_prefetch",
        "use actor_rollout_ref.actor.fsdp.limit_all_gathers=false, which prefetches two layers ahead",
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.model_dtype",
        "use actor_rollout_ref.actor.fsdp.model_dtype, spelled float32 | bfloat16 | float16 (auto = float32)",
    ),
    ("actor_rollout_ref.actor.fsdp_config.use_orig_params", _ORIG_PARAMS),
    ("actor_rollout_ref.actor.fsdp_config.seed", _SEED),
    ("actor_rollout_ref.actor.fsdp_config.full_determinism", _DETERMINISM),
    (
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
        "use actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    ),
    ("actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking", _CHUNKING),
    ("actor_rollout_ref.actor.fsdp_config.use_torch_compile", _COMPILE),
    ("actor_rollout_ref.actor.fsdp_config.entropy_checkpointing", "use actor_rollout_ref.actor.entropy_checkpointing"),
    ("actor_rollout_ref.actor.fsdp_config.forward_only", _FORWARD_ONLY),
    (
        "actor_rollout_ref.actor.fsdp_config.strategy",
        "use actor_rollout_ref.actor.strategy, whose fsdp is FSDP2 (verl's fsdp2)",
    ),
    (
        "actor_rollout_ref.actor.fsdp_config.dtype",
        "use actor_rollout_ref.actor.precision (bf16 | fp16) with actor_rollout_ref.actor.fsdp.mixed_precision=true",
    ),
    ("actor_rollout_ref.actor.rollout_n", _ROLLOUT_N),
    (
        "actor_rollout_ref.actor.ppo_micro_batch_size",
        "use actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    ("actor_rollout_ref.actor.tau_pos", _SAPO),
    ("actor_rollout_ref.actor.tau_neg", _SAPO),
    ("actor_rollout_ref.actor.freeze_vision_tower", "not supported yet: vision-language models"),
    ("actor_rollout_ref.actor.policy_loss._target_", _TARGET),
    ("actor_rollout_ref.actor.policy_loss.clip_cov_ratio", _CLIP_COV),
    ("actor_rollout_ref.actor.policy_loss.clip_cov_lb", _CLIP_COV),
    ("actor_rollout_ref.actor.policy_loss.clip_cov_ub", _CLIP_COV),
    ("actor_rollout_ref.actor.policy_loss.kl_cov_ratio", _KL_COV),
    ("actor_rollout_ref.actor.policy_loss.ppo_kl_coef", _KL_COV),
    (
        "actor_rollout_ref.actor.loss_scale_factor",
        "not supported yet: a fixed divisor for seq-mean-token-sum-norm (it is data.max_response_length)",
    ),
    (
        "actor_rollout_ref.actor.calculate_entropy",
        "not needed in hybridrl: the entropy is always computed and logged (actor/entropy)",
    ),
    ("actor_rollout_ref.actor.use_torch_compile", _COMPILE),
    ("actor_rollout_ref.actor.data_loader_seed", _LOADER_SEED),
    ("actor_rollout_ref.actor.checkpoint.async_save", _ASYNC_SAVE),
    ("actor_rollout_ref.actor.checkpoint.*", _CHECKPOINT),
    (
        "actor_rollout_ref.actor.use_fused_kernels",
        "use actor_rollout_ref.model.use_fused_kernels, which verl's key only mirrors",
    ),
    ("actor_rollout_ref.actor.profiler.*", _PROFILER),
    ("actor_rollout_ref.actor.router_replay.*", _ROUTER_REPLAY),
    ("actor_rollout_ref.actor.entropy_from_logits_with_chunking", _CHUNKING),
    (
        "actor_rollout_ref.actor.use_remove_padding",
        "use actor_rollout_ref.model.use_remove_padding, which verl's key only mirrors",
    ),
    ("actor_rollout_ref.actor.calculate_sum_pi_squared", _SUM_PI_SQUARED),
    ("actor_rollout_ref.actor.sum_pi_squared_checkpointing", _SUM_PI_SQUARED),
    # -- actor_rollout_ref.ref: the reference takes its engine settings from the actor's
    ("actor_rollout_ref.ref._target_", _TARGET),
    ("actor_rollout_ref.ref.rollout_n", _ROLLOUT_N),
    ("actor_rollout_ref.ref.strategy", "use actor_rollout_ref.actor.strategy, which the reference shares"),
    ("actor_rollout_ref.ref.use_torch_compile", _COMPILE),
    (
        "actor_rollout_ref.ref.log_prob_micro_batch_size",
        "use actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    ("actor_rollout_ref.ref.profiler.*", _PROFILER),
    ("actor_rollout_ref.ref.router_replay.*", _ROUTER_REPLAY),
    ("actor_rollout_ref.ref.fsdp_config._target_", _TARGET),
    ("actor_rollout_ref.ref.fsdp_config.wrap_policy.*", _WRAP_POLICY),
    ("actor_rollout_ref.ref.fsdp_config.param_offload", "use actor_rollout_ref.ref.param_offload"),
    ("actor_rollout_ref.ref.fsdp_config.optimizer_offload", "not needed in hybridrl: the reference has no optimizer"),
    (
        "actor_rollout_ref.ref.fsdp_config.offload_policy",
        "use actor_rollout_ref.actor.fsdp.cpu_offload, which the reference shares",
    ),
    (
        "actor_rollout_ref.ref.fsdp_config.reshard_after_forward",
        "use actor_rollout_ref.actor.fsdp.sharding_strategy, which the reference shares",
    ),
    (
        "actor_rollout_ref.ref.fsdp_config.fsdp_size",
        "use actor_rollout_ref.actor.fsdp.shard_group_size, which the reference shares",
    ),
    (
        "actor_rollout_ref.ref.fsdp_config.forward_prefetch",
        "use actor_rollout_ref.actor.fsdp.limit_all_gathers, which the reference shares",
    ),
    (
        "actor_rollout_ref.ref.fsdp_config.model_dtype",
        "use actor_rollout_ref.actor.fsdp.model_dtype, which the reference reads too (auto = bfloat16 on GPU)",
    ),
    ("actor_rollout_ref.ref.fsdp_config.use_orig_params", _ORIG_PARAMS),
    ("actor_rollout_ref.ref.fsdp_config.seed", _SEED),
    ("actor_rollout_ref.ref.fsdp_config.full_determinism", _DETERMINISM),
    (
        "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
        "use actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    ),
    ("actor_rollout_ref.ref.fsdp_config.entropy_from_logits_with_chunking", _CHUNKING),
    ("actor_rollout_ref.ref.fsdp_config.use_torch_compile", _COMPILE),
    ("actor_rollout_ref.ref.fsdp_config.entropy_checkpointing", _NO_GRADIENTS),
    ("actor_rollout_ref.ref.fsdp_config.forward_only", _FORWARD_ONLY),
    (
        "actor_rollout_ref.ref.fsdp_config.strategy",
        "use actor_rollout_ref.actor.strategy, which the reference shares",
    ),
    ("actor_rollout_ref.ref.fsdp_config.dtype", "use actor_rollout_ref.actor.precision, which the reference shares"),
    ("actor_rollout_ref.ref.entropy_from_logits_with_chunking", _CHUNKING),
    ("actor_rollout_ref.ref.entropy_checkpointing", _NO_GRADIENTS),
    # -- actor_rollout_ref.rollout: hf, vllm, sglang, each in the actor's workers
    ("actor_rollout_ref.rollout._target_", _TARGET),
    ("actor_rollout_ref.rollout.prompt_length", "use data.max_prompt_length, which verl's key only mirrors"),
    ("actor_rollout_ref.rollout.response_length", "use data.max_response_length, which verl's key only mirrors"),
    ("actor_rollout_ref.rollout.ignore_eos", "not supported yet: generating past the end-of-sequence token"),
    ("actor_rollout_ref.rollout.cudagraph_capture_sizes", "not supported yet: CUDA graphs in the rollout engine"),
    (
        "actor_rollout_ref.rollout.data_parallel_size",
        "not needed in hybridrl: the actor's ranks divided by rollout.tensor_model_parallel_size are the replicas",
    ),
    ("actor_rollout_ref.rollout.expert_parallel_size", "not supported yet: expert-parallel generation"),
    ("actor_rollout_ref.rollout.pipeline_model_parallel_size", "not supported yet: pipeline-parallel generation"),
    (
        "actor_rollout_ref.rollout.max_model_len",
        "not needed in hybridrl: the context is data.max_prompt_length + data.max_response_length",
    ),
    (
        "actor_rollout_ref.rollout.logprobs_mode",
        "not needed in hybridrl: vllm returns processed_logprobs (after temperature), hf the temperature-scaled ones",
    ),
    ("actor_rollout_ref.rollout.scheduling_policy", "not supported yet: vLLM's request scheduling policy"),
    (
        "actor_rollout_ref.rollout.log_prob_micro_batch_size",
        "use actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    (
        "actor_rollout_ref.rollout.disable_log_stats",
        "not needed in hybridrl: the vllm engine runs with its statistics log off",
    ),
    (
        "actor_rollout_ref.rollout.over_sample_rate",
        "not supported yet: ending a rollout early once most responses are done",
    ),
    ("actor_rollout_ref.rollout.multi_stage_wake_up", "not supported yet: SGLang's staged wake-up after training"),
    (
        "actor_rollout_ref.rollout.engine_kwargs.*",
        "not supported yet: extra vLLM/SGLang/TensorRT-LLM engine arguments",
    ),
    ("actor_rollout_ref.rollout.val_kwargs._target_", _TARGET),
    ("actor_rollout_ref.rollout.multi_turn._target_", _TARGET),
    (
        "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode",
        "not needed in hybridrl: the trajectory keeps the tokens as generated; nothing is re-tokenized to check",
    ),
    (
        "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template",
        "not supported yet: re-rendering earlier turns with the inference chat template",
    ),
    ("actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts", "not supported yet: SGLang's repeated rollouts"),
    (
        "actor_rollout_ref.rollout.calculate_log_probs",
        "not needed in hybridrl: every engine returns rollout log-probs (training/rollout_probs_diff_*)",
    ),
    ("actor_rollout_ref.rollout.agent._target_", _TARGET),
    (
        "actor_rollout_ref.rollout.agent.num_workers",
        "not needed in hybridrl: the agent loop runs in every generating worker, samples side by side",
    ),
    (
        "actor_rollout_ref.rollout.agent.agent_loop_config_path",
        "not supported yet: agent loops of your own (single_turn_agent and tool_agent are built in)",
    ),
    ("actor_rollout_ref.rollout.agent.custom_async_server.*", "not supported yet: a rollout server of your own"),
    (
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
        "use actor_rollout_ref.rollout.update_weights_bucket_megabytes",
    ),
    (
        "actor_rollout_ref.rollout.checkpoint_engine.*",
        "not needed in hybridrl: weights stream to a colocated engine, and in buckets to a rollout pool",
    ),
    ("actor_rollout_ref.rollout.trace.*", "not supported yet: tracing rollouts to MLflow or Weave"),
    ("actor_rollout_ref.rollout.skip_rollout", _SKIP_ROLLOUT),
    ("actor_rollout_ref.rollout.skip_dump_dir", _SKIP_ROLLOUT),
    (
        "actor_rollout_ref.rollout.skip_tokenizer_init",
        "not needed in hybridrl: the engines take and return token ids; the worker's tokenizer decodes",
    ),
    ("actor_rollout_ref.rollout.enable_rollout_routing_replay", _ROUTER_REPLAY),
    ("actor_rollout_ref.rollout.profiler.*", _PROFILER),
    ("actor_rollout_ref.rollout.prometheus.*", "not supported yet: Prometheus metrics of a rollout server"),
    ("actor_rollout_ref.rollout.quantization", _QUANTIZATION),
    ("actor_rollout_ref.rollout.quantization_config_file", _QUANTIZATION),
    ("actor_rollout_ref.rollout.mtp.*", "not supported yet: speculative decoding with multi-token prediction"),
    (
        "actor_rollout_ref.rollout.layered_summon",
        "not needed in hybridrl: the weights are gathered for the rollout one tensor at a time",
    ),
    # -- actor_rollout_ref.model
    ("actor_rollout_ref.model._target_", _TARGET),
    (
        "actor_rollout_ref.model.hf_config_path",
        "not supported yet: a model config from another directory than the model's",
    ),
    ("actor_rollout_ref.model.use_shm", _SHM),
    ("actor_rollout_ref.model.custom_chat_template", "not supported yet: a chat template other than the tokenizer's"),
    ("actor_rollout_ref.model.external_lib", _EXTERNAL_LIB),
    ("actor_rollout_ref.model.override_config.*", _OVERRIDE_CONFIG),
    ("actor_rollout_ref.model.enable_activation_offload", _ACTIVATION_OFFLOAD),
    (
        "actor_rollout_ref.model.lora_adapter_path",
        "not supported yet: starting from a saved LoRA adapter (new adapters start at zero update)",
    ),
    (
        "actor_rollout_ref.model.use_liger",
        "not supported yet: Liger kernels (actor_rollout_ref.model.use_fused_kernels avoids the logits)",
    ),
    (
        "actor_rollout_ref.model.fused_kernel_options.*",
        "not needed in hybridrl: use_fused_kernels has one implementation, in PyTorch",
    ),
    ("actor_rollout_ref.model.tiled_mlp.*", _TILED_MLP),
    ("actor_rollout_ref.model.mtp.*", "not supported yet: multi-token prediction (MTP) layers"),
    ("actor_rollout_ref.hybrid_engine", "not needed in hybridrl: the actor and the rollout always share workers"),
    ("actor_rollout_ref.nccl_timeout", "use trainer.ray.call_timeout_s, the torch.distributed group's timeout"),
    # -- data
    ("data.tokenizer", "use actor_rollout_ref.model.tokenizer_path"),
    ("data.use_shm", "not needed in hybridrl: data files are read from local paths (no shared-memory copy)"),
    ("data.train_max_samples", "not supported yet: training on a random subset of data.train_files"),
    ("data.val_max_samples", "not supported yet: validating on a random subset of data.val_files"),
    (
        "data.val_batch_size",
        "not needed in hybridrl: validation runs in chunks of data.train_batch_size (verl deprecates the key)",
    ),
    (
        "data.tool_config_path",
        "use actor_rollout_ref.rollout.multi_turn.tool_config_path, whose tools the prompts show",
    ),
    (
        "data.return_raw_input_ids",
        "not needed in hybridrl: the reward model re-tokenizes the decoded text with its own tokenizer",
    ),
    (
        "data.return_raw_chat",
        "not needed in hybridrl: prompts are templated at load (with the tools' schemas for multi-turn rollouts)",
    ),
    ("data.return_full_prompt", "not supported yet: keeping the templated prompt text in the batch"),
    (
        "data.dataloader_num_workers",
        "not needed in hybridrl: the data is read into memory at start and batched in the driver",
    ),
    ("data.image_patch_size", _MULTI_MODAL),
    ("data.validation_shuffle", "not supported yet: shuffling the validation set"),
    ("data.filter_overlong_prompts_workers", "not supported yet: filtering overlong prompts in several processes"),
    ("data.image_key", _MULTI_MODAL),
    ("data.video_key", _MULTI_MODAL),
    (
        "data.trust_remote_code",
        "use actor_rollout_ref.model.trust_remote_code, which also covers the tokenizer",
    ),
    ("data.custom_cls.*", "not supported yet: a custom dataset class"),
    ("data.return_multi_modal_inputs", _MULTI_MODAL),
    ("data.sampler.*", "not supported yet: a custom (curriculum) sampler"),
    ("data.datagen.*", "not supported yet: generating data during training"),
    ("data.apply_chat_template_kwargs.*", "not supported yet: extra arguments to the tokenizer's apply_chat_template"),
    # -- reward_manager
    ("reward_manager.*", _REWARD_MANAGER),
    # -- critic
    ("critic._target_", _TARGET),
    ("critic.optim._target_", _TARGET),
    ("critic.optim.optimizer", _OPTIMIZER),
    ("critic.optim.optimizer_impl", _OPTIMIZER),
    ("critic.optim.clip_grad", "use critic.grad_clip"),
    ("critic.optim.override_optimizer_config.*", _OPTIMIZER_KWARGS),
    ("critic.model.fsdp_config._target_", _TARGET),
    ("critic.model.fsdp_config.wrap_policy.*", _WRAP_POLICY),
    ("critic.model.fsdp_config.param_offload", "use critic.fsdp.param_offload"),
    ("critic.model.fsdp_config.optimizer_offload", "use critic.fsdp.optimizer_offload"),
    ("critic.model.fsdp_config.offload_policy", "use critic.fsdp.cpu_offload, which is FSDP2's CPUOffloadPolicy"),
    (
        "critic.model.fsdp_config.reshard_after_forward",
        "use critic.fsdp.sharding_strategy, where SHARD_GRAD_OP = reshard_after_forward=false",
    ),
    ("critic.model.fsdp_config.fsdp_size", "use critic.fsdp.shard_group_size, with sharding_strategy=HYBRID_SHARD"),
    (
        "critic.model.fsdp_config.forward_prefetch",
        "use critic.fsdp.limit_all_gathers=false, which prefetches two layers ahead",
    ),
    (
        "critic.model.fsdp_config.model_dtype",
        "use critic.fsdp.model_dtype, spelled float32 | bfloat16 | float16 (auto = float32)",
    ),
    ("critic.model.fsdp_config.use_orig_params", _ORIG_PARAMS),
    ("critic.model.fsdp_config.seed", _SEED),
    ("critic.model.fsdp_config.full_determinism", _DETERMINISM),
    ("critic.model.fsdp_config.ulysses_sequence_parallel_size", "use critic.ulysses_sequence_parallel_size"),
    (
        "critic.model.fsdp_config.entropy_from_logits_with_chunking",
        "not needed in hybridrl: the critic computes no log-probs or entropy",
    ),
    ("critic.model.fsdp_config.use_torch_compile", _COMPILE),
    ("critic.model.fsdp_config.entropy_checkpointing", "not needed in hybridrl: the critic computes no entropy"),
    ("critic.model.fsdp_config.forward_only", _FORWARD_ONLY),
    ("critic.model.fsdp_config.strategy", "use critic.strategy, whose fsdp is FSDP2 (verl's fsdp2)"),
    ("critic.model.fsdp_config.dtype", "use critic.precision (bf16 | fp16) with critic.fsdp.mixed_precision=true"),
    ("critic.model.tokenizer_path", "use actor_rollout_ref.model.tokenizer_path, which the critic shares"),
    ("critic.model.override_config.*", _OVERRIDE_CONFIG),
    ("critic.model.external_lib", _EXTERNAL_LIB),
    ("critic.model._target_", _TARGET),
    ("critic.model.use_shm", _SHM),
    ("critic.model.enable_activation_offload", _ACTIVATION_OFFLOAD),
    ("critic.model.lora_rank", _LORA),
    ("critic.model.lora_alpha", _LORA),
    ("critic.model.target_modules", _LORA),
    ("critic.model.tiled_mlp.*", _TILED_MLP),
    ("critic.rollout_n", _ROLLOUT_N),
    (
        "critic.ppo_micro_batch_size",
        "use critic.ppo_micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    ("critic.data_loader_seed", _LOADER_SEED),
    ("critic.checkpoint.async_save", _ASYNC_SAVE),
    ("critic.checkpoint.*", _CHECKPOINT),
    ("critic.profiler.*", _PROFILER),
    (
        "critic.forward_micro_batch_size",
        "use critic.forward_micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    # -- reward_model: a Hugging Face sequence classifier on FSDP, on its own role
    (
        "reward_model.enable_resource_pool",
        "use resource_pool.mapping.reward_model, which can name a pool of its own",
    ),
    (
        "reward_model.n_gpus_per_node",
        "use resource_pool.pools, to size the pool resource_pool.mapping.reward_model names",
    ),
    ("reward_model.nnodes", "use resource_pool.pools, to size the pool resource_pool.mapping.reward_model names"),
    ("reward_model.strategy", "use reward_model.fsdp, which is FSDP2 (the reward model's one engine)"),
    (
        "reward_model.model.input_tokenizer",
        "not needed in hybridrl: responses are always decoded and re-tokenized with reward_model.model.tokenizer_path",
    ),
    ("reward_model.model.external_lib", _EXTERNAL_LIB),
    ("reward_model.model.override_config.*", _OVERRIDE_CONFIG),
    ("reward_model.model.use_shm", _SHM),
    ("reward_model.model.use_fused_kernels", "not supported yet: fused kernels for the reward model"),
    ("reward_model.model.fsdp_config._target_", _TARGET),
    ("reward_model.model.fsdp_config.wrap_policy.*", _WRAP_POLICY),
    ("reward_model.model.fsdp_config.param_offload", "use reward_model.fsdp.param_offload"),
    (
        "reward_model.model.fsdp_config.reshard_after_forward",
        "use reward_model.fsdp.sharding_strategy, where SHARD_GRAD_OP = reshard_after_forward=false",
    ),
    (
        "reward_model.model.fsdp_config.fsdp_size",
        "use reward_model.fsdp.shard_group_size, with sharding_strategy=HYBRID_SHARD",
    ),
    (
        "reward_model.model.fsdp_config.forward_prefetch",
        "use reward_model.fsdp.limit_all_gathers=false, which prefetches two layers ahead",
    ),
    (
        "reward_model.micro_batch_size",
        "use reward_model.micro_batch_size_per_gpu, which counts per worker (not in total)",
    ),
    ("reward_model.use_dynamic_bsz", "not supported yet: token-budget micro-batches for the reward model"),
    (
        "reward_model.forward_max_token_len_per_gpu",
        "not supported yet: token-budget micro-batches for the reward model",
    ),
    ("reward_model.reward_loop_source", _REWARD_LOOP),
    ("reward_model.reward_loop_module_path", _REWARD_LOOP),
    ("reward_model.reward_loop_class_name", _REWARD_LOOP),
    (
        "reward_model.launch_reward_fn_async",
        "not supported yet: scoring during the log-prob pass (reward.num_workers scores in parallel processes)",
    ),
    ("reward_model.sandbox_fusion.*", "not supported yet: running code in a Sandbox Fusion service for rewards"),
    ("reward_model.profiler.*", _PROFILER),
    ("reward_model.ulysses_sequence_parallel_size", _ULYSSES),
    (
        "reward_model.use_reward_loop",
        "not needed in hybridrl: one reward path (reward functions in reward.num_workers processes, the reward model)",
    ),
    ("reward_model.num_workers", "use reward.num_workers, which counts the processes running reward functions"),
    (
        "reward_model.rollout.*",
        "not needed in hybridrl: the reward model runs as a sequence classifier on FSDP in its own workers",
    ),
    # -- keys verl's scripts set beyond ppo_trainer.yaml (SCRIPT_KEYS): its Megatron config and + additions
    (
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
        "use actor_rollout_ref.actor.parallel_config.megatron.tp_size",
    ),
    (
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size",
        "use actor_rollout_ref.actor.parallel_config.megatron.pp_size",
    ),
    (
        "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size",
        "not supported yet: interleaved (virtual) pipeline stages",
    ),
    (
        "actor_rollout_ref.ref.megatron.*",
        "use actor_rollout_ref.actor.parallel_config.megatron, which the reference shares",
    ),
    ("critic.megatron.tensor_model_parallel_size", "use critic.parallel_config.megatron.tp_size"),
    ("critic.megatron.pipeline_model_parallel_size", "use critic.parallel_config.megatron.pp_size"),
    ("reward_model.reward_kwargs.overlong_buffer_cfg.enable", "use reward_model.overlong_buffer.enable"),
    ("reward_model.reward_kwargs.overlong_buffer_cfg.len", "use reward_model.overlong_buffer.len"),
    (
        "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor",
        "use reward_model.overlong_buffer.penalty_factor",
    ),
    ("reward_model.reward_kwargs.overlong_buffer_cfg.log", "use reward_model.overlong_buffer.log"),
    (
        "reward_model.reward_kwargs.max_resp_len",
        "not needed in hybridrl: the overlong penalty counts back from data.max_response_length",
    ),
    ("actor_rollout_ref.model.torch_dtype", "use actor_rollout_ref.actor.fsdp.model_dtype"),
    # -- algorithm
    ("algorithm.rollout_correction.rollout_rs", _REJECTION),
    ("algorithm.rollout_correction.rollout_rs_threshold", _REJECTION),
    (
        "algorithm.rollout_correction.bypass_mode",
        "not supported yet: rollout log-probs in place of the old log-prob pass",
    ),
    ("algorithm.rollout_correction.loss_type", "not supported yet: rollout correction with a loss other than ppo_clip"),
    (
        "algorithm.rollout_correction.rollout_is_batch_normalize",
        "not supported yet: importance weights normalised to mean 1 per batch",
    ),
    ("algorithm._target_", _TARGET),
    ("algorithm.kl_ctrl._target_", _TARGET),
    ("algorithm.use_pf_ppo", "not supported yet: preference-feedback PPO (samples reweighted by reward)"),
    ("algorithm.pf_ppo.*", "not supported yet: preference-feedback PPO (samples reweighted by reward)"),
    # -- trainer
    (
        "trainer.log_val_generations",
        "use trainer.val_generations_to_log, which writes them to <output_dir>/val_generations/, not the tracker",
    ),
    ("trainer.rollout_data_dir", "not supported yet: dumping every training rollout to files"),
    (
        "trainer.validation_data_dir",
        "use trainer.val_generations_to_log, which saves that many per validation in <output_dir>/val_generations/",
    ),
    (
        "trainer.esi_redundant_time",
        "not supported yet: saving a checkpoint ahead of an elastic instance's shutdown",
    ),
    ("trainer.val_only", "not supported yet: validating without training"),
    ("trainer.default_hdfs_dir", "not supported yet: copying checkpoints to HDFS"),
    ("trainer.del_local_ckpt_after_load", "not supported yet: deleting a checkpoint once it is loaded"),
    ("trainer.max_actor_ckpt_to_keep", "use trainer.max_ckpt_to_keep, which counts whole checkpoints (all roles)"),
    ("trainer.max_critic_ckpt_to_keep", "use trainer.max_ckpt_to_keep, which counts whole checkpoints (all roles)"),
    ("trainer.ray_wait_register_center_timeout", "use trainer.ray.start_timeout_s"),
    ("trainer.use_legacy_worker_impl", "not needed in hybridrl: there is one worker implementation per role"),
    # -- the rest of the tree
    ("global_profiler.*", _PROFILER),
    ("transfer_queue.*", "not supported yet: TransferQueue, verl's data plane between roles"),
    ("ray_kwargs.ray_init.num_cpus", "use trainer.ray.num_cpus"),
    (
        "ray_kwargs.timeline_json_file",
        "use trainer.trace, which writes <output_dir>/trace.json, a timeline of every rank",
    ),
)


_FSDP_RESHARD = {True: "FULL_SHARD", False: "SHARD_GRAD_OP"}
_FSDP_PREFETCH = {True: False, False: True}  # verl's forward_prefetch=true is limit_all_gathers=false here
_DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "auto": "auto",
}
_STRATEGIES = {"fsdp": "fsdp", "fsdp2": "fsdp", "megatron": "megatron"}


def _fsdp_renames(verl: str, ours: str, role: str) -> dict[str, tuple[str, dict[Any, Any] | None]]:
    """verl's ``fsdp_config`` section of a role, onto hybridrl's ``fsdp`` section (and the role's strategy)."""
    return {
        f"{verl}.param_offload": (f"{ours}.param_offload", None),
        f"{verl}.optimizer_offload": (f"{ours}.optimizer_offload", None),
        f"{verl}.offload_policy": (f"{ours}.cpu_offload", None),
        f"{verl}.reshard_after_forward": (f"{ours}.sharding_strategy", _FSDP_RESHARD),
        f"{verl}.forward_prefetch": (f"{ours}.limit_all_gathers", _FSDP_PREFETCH),
        f"{verl}.model_dtype": (f"{ours}.model_dtype", _DTYPES),
        f"{verl}.strategy": (f"{role}.strategy", _STRATEGIES),
        f"{verl}.ulysses_sequence_parallel_size": (f"{role}.ulysses_sequence_parallel_size", None),
    }


_REF_ULYSSES = "actor_rollout_ref.ref.ulysses_sequence_parallel_size"
_BUCKET_MB = "update_weights_bucket_megabytes"

# verl key -> (hybridrl key, verl value -> hybridrl value or None for the same value): the value moves there.
RENAMES: dict[str, tuple[str, dict[Any, Any] | None]] = {
    **_fsdp_renames("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.actor.fsdp", "actor_rollout_ref.actor"),
    **_fsdp_renames("critic.model.fsdp_config", "critic.fsdp", "critic"),
    "actor_rollout_ref.actor.fsdp_config.entropy_checkpointing": (
        "actor_rollout_ref.actor.entropy_checkpointing",
        None,
    ),
    "actor_rollout_ref.actor.optim.clip_grad": ("actor_rollout_ref.actor.grad_clip", None),
    "actor_rollout_ref.actor.use_fused_kernels": ("actor_rollout_ref.model.use_fused_kernels", None),
    "actor_rollout_ref.actor.use_remove_padding": ("actor_rollout_ref.model.use_remove_padding", None),
    "actor_rollout_ref.ref.fsdp_config.param_offload": ("actor_rollout_ref.ref.param_offload", None),
    f"actor_rollout_ref.rollout.checkpoint_engine.{_BUCKET_MB}": (f"actor_rollout_ref.rollout.{_BUCKET_MB}", None),
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size": (_REF_ULYSSES, None),
    "critic.optim.clip_grad": ("critic.grad_clip", None),
    "reward_model.model.fsdp_config.param_offload": ("reward_model.fsdp.param_offload", None),
    "reward_model.model.fsdp_config.reshard_after_forward": ("reward_model.fsdp.sharding_strategy", _FSDP_RESHARD),
    "reward_model.model.fsdp_config.forward_prefetch": ("reward_model.fsdp.limit_all_gathers", _FSDP_PREFETCH),
    "reward_model.num_workers": ("reward.num_workers", None),
    "data.tokenizer": ("actor_rollout_ref.model.tokenizer_path", None),
    "data.trust_remote_code": ("actor_rollout_ref.model.trust_remote_code", None),
    "trainer.log_val_generations": ("trainer.val_generations_to_log", None),
    "trainer.max_actor_ckpt_to_keep": ("trainer.max_ckpt_to_keep", None),
    "trainer.max_critic_ckpt_to_keep": ("trainer.max_ckpt_to_keep", None),
    "trainer.ray_wait_register_center_timeout": ("trainer.ray.start_timeout_s", None),
    "ray_kwargs.ray_init.num_cpus": ("trainer.ray.num_cpus", None),
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.tp_size",
        None,
    ),
    "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.pp_size",
        None,
    ),
    "critic.megatron.tensor_model_parallel_size": ("critic.parallel_config.megatron.tp_size", None),
    "critic.megatron.pipeline_model_parallel_size": ("critic.parallel_config.megatron.pp_size", None),
    **{
        f"reward_model.reward_kwargs.overlong_buffer_cfg.{name}": (f"reward_model.overlong_buffer.{name}", None)
        for name in ("enable", "len", "penalty_factor", "log")
    },
    "actor_rollout_ref.model.torch_dtype": ("actor_rollout_ref.actor.fsdp.model_dtype", _DTYPES),
}


# verl key -> the hybridrl key whose value it must equal: a setting the reference shares with the actor here
# (verl gives the reference its own). Equal values are accepted (checked once the config is merged).
SHARED: dict[str, str] = {
    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size": "actor_rollout_ref.actor.parallel_config.megatron.tp_size",
    "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size": (
        "actor_rollout_ref.actor.parallel_config.megatron.pp_size"
    ),
}


class RuleKind(enum.Enum):
    RENAME = "rename"  # verl's spelling of a hybridrl key
    OFF_ONLY = "off_only"  # accepted at its off value, else refused with the answer
    IGNORED = "ignored"  # no job here: accepted whatever the value


@dataclass(frozen=True)
class Outcome:
    """What the loader does with one verl key's value: move it to ``target`` (a rename), accept it (``None``
    target, ``refusal`` None), accept it if the merged config's ``equals`` key has the same value, or refuse
    it with ``refusal``, one line."""

    target: str | None = None
    value: Any = None
    refusal: str | None = None
    equals: str | None = None  # accepted if the merged config's value of this hybridrl key is ``value``


@dataclass(frozen=True)
class VerlRule:
    pattern: str
    answer: str

    @property
    def kind(self) -> RuleKind:
        if self.pattern in RENAMES:
            return RuleKind.RENAME
        if self.answer.startswith("not needed in hybridrl"):
            return RuleKind.IGNORED
        return RuleKind.OFF_ONLY

    def apply(self, key: str, value: Any) -> Outcome:
        """The outcome for ``key=value`` (``key`` matched this rule)."""
        kind = self.kind
        if kind == RuleKind.IGNORED:
            return Outcome()
        if kind == RuleKind.RENAME:
            target, values = RENAMES[self.pattern]
            if values is None:
                return Outcome(target, value)
            for verl_value, ours in values.items():
                if _same(value, verl_value):
                    return Outcome(target, ours)
            spelled = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
            return Outcome(refusal=f"'{key}={value}' is not one of verl's values ({spelled}); {self.answer}")
        if is_off(key, value):
            return Outcome()
        if key in SHARED:
            return Outcome(value=value, equals=SHARED[key])
        return Outcome(refusal=f"'{key}={value}' is a verl setting that hybridrl does not take: {self.answer}")


def _same(value: Any, other: Any) -> bool:
    """verl's value equality across spellings: ``True``/``true``, ``1``/``1.0``, case-blind strings."""
    if isinstance(value, bool) or isinstance(other, bool):
        return str(value).lower() == str(other).lower()
    if isinstance(value, int | float) and isinstance(other, int | float):
        return float(value) == float(other)
    if isinstance(value, str) and isinstance(other, str):
        return value.lower() == other.lower()
    return bool(value == other)


def is_off(key: str, value: Any) -> bool:
    """A feature's off value: null, false, empty, or verl's own default for ``key`` (the value that leaves
    verl's feature off, e.g. ``ulysses_sequence_parallel_size=1``, ``fsdp_size=-1``)."""
    if value is None or value is False or (isinstance(value, str | list | dict) and not value):
        return True
    defaults = VERL_DEFAULTS if key in VERL_DEFAULTS else SCRIPT_DEFAULTS
    return key in defaults and _same(value, defaults[key])


VERL_RULES: tuple[VerlRule, ...] = tuple(VerlRule(pattern, answer) for pattern, answer in VERL_ANSWERS)


def verl_rule(key: str) -> VerlRule | None:
    """The first rule that matches ``key``, or None. Meant for keys hybridrl's schema does not have (a key
    it has works as in verl and needs no rule)."""
    for rule in VERL_RULES:
        pattern = rule.pattern
        if pattern.endswith(".*"):
            if key == pattern[:-2] or key.startswith(pattern[:-1]):
                return rule
        elif key == pattern:
            return rule
    return None


def verl_answer(key: str) -> str | None:
    """The answer of the first rule that matches ``key``, or None."""
    rule = verl_rule(key)
    return rule.answer if rule is not None else None
