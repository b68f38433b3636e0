"""Which dtype each copy of the weights is kept in: the one place that resolves ``auto``."""

from __future__ import annotations

import torch

from hybridrl.config.choices import DType, Precision

_TORCH = {DType.float32: torch.float32, DType.bfloat16: torch.bfloat16, DType.float16: torch.float16}


def weights_dtype(model_dtype: DType, *, trained: bool, device: torch.device) -> torch.dtype:
    """A role's parameters: fp32 masters for trained roles; frozen roles (ref, reward model) in bf16 on
    an accelerator (verl's default: half the memory, and their forward runs in low precision anyway),
    fp32 on CPU, where bf16 matmuls are slow."""
    if model_dtype != DType.auto:
        return _TORCH[model_dtype]
    return torch.float32 if trained or device.type == "cpu" else torch.bfloat16


def rollout_dtype(dtype: DType, actor_precision: Precision, device: torch.device) -> torch.dtype:
    """The generation copy: bf16 on an accelerator; on CPU the actor's precision decides (fp32 keeps
    the rollout's log-probs equal to the trainer's)."""
    if dtype != DType.auto:
        return _TORCH[dtype]
    if device.type != "cpu" or actor_precision == Precision.bf16:
        return torch.bfloat16
    return torch.float32
