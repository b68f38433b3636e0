"""FSDP2 (``torch.distributed.fsdp.fully_shard``) applied to a single-device model from outside.

Sharding strategies map onto FSDP2 as: FULL_SHARD = reshard parameters after forward;
SHARD_GRAD_OP = keep them gathered between forward and backward (``reshard_after_forward=False``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard


def wrap_units(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks to shard one by one (HF's ``_no_split_modules``: its decoder layers)."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or [])
    units = [m for m in model.modules() if type(m).__name__ in names]
    if not units:
        raise ValueError(
            f"Found no transformer blocks to shard in {type(model).__name__}: it declares no "
            f"_no_split_modules. FSDP needs the model's decoder-layer class."
        )
    return units


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, sharding_strategy: str = "FULL_SHARD",
               mixed_precision: bool = False, cpu_offload: bool = False) -> nn.Module:
    reshard = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}[sharding_strategy]
    kwargs = {"mesh": mesh, "reshard_after_forward": reshard}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if cpu_offload:
        # Pinned memory needs an accelerator; without one plain CPU memory is the offload target.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    for unit in wrap_units(model):
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the whole, unsharded state dict (the hand-over to generation and export)."""
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
