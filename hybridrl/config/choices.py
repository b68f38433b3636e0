"""The closed sets of values configuration keys take: string enums spelled as users write them."""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A closed set of values. Members are named as users write them, compare equal to those strings,
    and print as them (``f"{Strategy.fsdp}"`` is ``fsdp``)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(str(self), format_spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class Strategy(Choice):
    fsdp = "fsdp"
    megatron = "megatron"


class ShardingStrategy(Choice):
    FULL_SHARD = "FULL_SHARD"
    SHARD_GRAD_OP = "SHARD_GRAD_OP"
    NO_SHARD = "NO_SHARD"
    HYBRID_SHARD = "HYBRID_SHARD"


class Precision(Choice):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"


class DType(Choice):
    """A weight dtype, spelled as torch and verl spell it; auto = the role's documented default."""

    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class PipelineSchedule(Choice):
    # "1F1B" is not a Python identifier: the member is set through the class namespace (PipelineSchedule["1F1B"]).
    vars()["1F1B"] = "1F1B"
    GPipe = "GPipe"


class RewardOnError(Choice):
    vars()["raise"] = "raise"  # a keyword: RewardOnError["raise"]
    fail = "fail"


class RewardManager(Choice):
    naive = "naive"
    batch = "batch"
    dapo = "dapo"
    prime = "prime"


class LRSchedulerType(Choice):
    constant = "constant"
    cosine = "cosine"


class RolloutName(Choice):
    hf = "hf"
    vllm = "vllm"
    sglang = "sglang"


class ToolCallFormat(Choice):
    hermes = "hermes"


class TruncateSide(Choice):
    left = "left"
    right = "right"
    middle = "middle"


class RolloutMode(Choice):
    sync = "sync"
    vars()["async"] = "async"  # a keyword: RolloutMode["async"]


class AgentLoopName(Choice):
    single_turn_agent = "single_turn_agent"
    tool_agent = "tool_agent"


class RolloutCorrection(Choice):
    """verl's ``rollout_is``: importance weights for the rollout-vs-trainer gap, per token or per sequence."""

    token = "token"
    sequence = "sequence"


class KLControlType(Choice):
    fixed = "fixed"
    adaptive = "adaptive"


class KLPenalty(Choice):
    kl = "kl"
    k1 = "k1"
    abs = "abs"
    mse = "mse"
    k2 = "k2"
    low_var_kl = "low_var_kl"
    k3 = "k3"


class Device(Choice):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Truncation(Choice):
    error = "error"
    left = "left"
    right = "right"


class Tracker(Choice):
    console = "console"
    jsonl = "jsonl"
    tensorboard = "tensorboard"
    wandb = "wandb"
    mlflow = "mlflow"
