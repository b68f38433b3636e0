"""Rewards: the learned reward model and DAPO's length penalty, a user's reward function, and how reward
functions run (processes, deadline, failures)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.choices import Precision, RewardManager, RewardOnError
from hybridrl.config.schema.engine import FSDPConfig
from hybridrl.config.schema.fields import doc, finite, section


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

    def problems(self, at: str) -> list[str]:
        """The buffer's length against data.max_response_length is the whole config's (``Config.problems``)."""
        problems = finite(at, weight=self.weight)
        if self.overlong_buffer.enable and self.reward_manager != "dapo":
            problems.append(f"{at}.overlong_buffer.enable=true needs {at}.reward_manager=dapo (as in verl).")
        if self.precision == Precision.fp16:
            problems.append(
                f"{at}.precision=fp16 is not supported (no loss scaling for a frozen model); use fp32 or bf16."
            )
        return problems


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

    def problems(self, at: str) -> list[str]:
        problems = finite(at, failure_score=self.failure_score)
        if self.num_workers < 0 or self.timeout_s <= 0:
            problems.append(
                f"{at}.num_workers={self.num_workers} must be >= 0 (0 = score in the driver) and "
                f"{at}.timeout_s={self.timeout_s} > 0."
            )
        return problems
