"""FSDP2 (``torch.distributed.fsdp.fully_shard``) applied to a single-device model from outside.

The FSDP1 sharding strategies map onto FSDP2 as:
- FULL_SHARD: 1-D mesh over all ranks, parameters resharded after forward;
- SHARD_GRAD_OP: 1-D mesh, parameters kept gathered between forward and backward;
- NO_SHARD: data parallelism. The engine keeps a plain module on every rank and averages the gradients in
  all-reduces of 25 MB buckets before each step (``FSDPEngine.reduce_gradients``); only where FSDP2's
  mixed-precision or CPU-offload policy is asked for is it FSDP2 on a 2-D mesh (replicate=world, shard=1);
- HYBRID_SHARD: 2-D mesh (replicate=world/g, shard=g): sharded inside groups of g ranks (default: the
  ranks of one node), replicated across groups, gradients averaged across replicas by FSDP2 itself
  (FSDP1's HYBRID_SHARD on a size-1 shard dimension silently stopped averaging; FSDP2 does not).
``limit_all_gathers`` maps onto FSDP2's prefetching: true keeps FSDP2's default (one layer's
all-gather in flight ahead of compute); false prefetches two layers ahead in forward and backward, which
overlaps more communication at the cost of memory for the extra gathered layer.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

from hybridrl.config.choices import ShardingStrategy


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


def fsdp_mesh(
    device_type: str, world_size: int, sharding_strategy: ShardingStrategy, shard_group_size: int
) -> DeviceMesh:
    """The device mesh a sharding strategy needs (every rank must call this in the same order)."""
    if sharding_strategy == ShardingStrategy.NO_SHARD:
        shape = (world_size, 1)
    elif sharding_strategy == ShardingStrategy.HYBRID_SHARD:
        if shard_group_size < 1 or world_size % shard_group_size:
            raise ValueError(
                f"HYBRID_SHARD: shard_group_size ({shard_group_size}) must divide the role's {world_size} workers."
            )
        shape = (world_size // shard_group_size, shard_group_size)
    else:
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
    return init_device_mesh(device_type, shape, mesh_dim_names=("replicate", "shard"))


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh,
    sharding_strategy: ShardingStrategy = ShardingStrategy.FULL_SHARD,
    mixed_precision: bool = False,
    cpu_offload: bool = False,
    limit_all_gathers: bool = True,
    param_dtype: torch.dtype = torch.bfloat16,
) -> nn.Module:
    reshard = sharding_strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        # Pinned memory needs an accelerator; without one plain CPU memory is the offload target.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    units = wrap_units(model)
    for unit in units:
        fully_shard(unit, **kwargs)
    fully_shard(model, **kwargs)
    if not limit_all_gathers:
        sharded = cast(list[FSDPModule], units)  # fully_shard made each unit an FSDPModule
        for i, block in enumerate(sharded):
            block.set_modules_to_forward_prefetch(sharded[i + 1 : i + 3])
            block.set_modules_to_backward_prefetch(sharded[max(0, i - 2) : i][::-1])
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every rank gets the whole, unsharded state dict (the hand-over to generation and export)."""
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
    return cast(dict[str, torch.Tensor], state)
