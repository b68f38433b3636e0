"""The FSDP training engine: FSDP2 (``fully_shard``) over the group's ranks, built the way the Megatron engine
is: from an empty or single-device model, its strategy applied inside the engine's constructor."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hybridrl.config.choices import Precision, ShardingStrategy
from hybridrl.config.schema import FSDPConfig, OptimConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.fsdp.sharding import apply_fsdp, fsdp_mesh, full_state_dict
from hybridrl.engine.precision import DynamicLossScaler
from hybridrl.models.weights import WeightSource, load_weights, materialize


class FSDPEngine(TrainEngine):
    def __init__(
        self,
        model: nn.Module,
        fsdp: FSDPConfig,
        mesh: DeviceMesh,
        device: torch.device,
        *,
        ranks_per_node: int | None = None,
        precision: Precision = Precision.fp32,
        optim_cfg: OptimConfig | None = None,
        loss_scaler: DynamicLossScaler | None = None,
        weights: WeightSource | None = None,
        remove_padding: bool = False,
        fused_kernels: bool = False,
        share_prompts: bool = False,
    ) -> None:
        """``mesh`` is the group's 1-D mesh; NO_SHARD and HYBRID_SHARD build their 2-D one from the same
        ranks. With ``weights``, ``model`` is empty (meta parameters): it is sharded first, then each rank
        allocates and reads only its shards, so no rank ever holds the whole model."""
        if fsdp.sharding_strategy in (ShardingStrategy.NO_SHARD, ShardingStrategy.HYBRID_SHARD):
            group = fsdp.shard_group_size or ranks_per_node or mesh.size()
            mesh = fsdp_mesh(device.type, mesh.size(), fsdp.sharding_strategy, group)
        if weights is None:
            model = model.to(device)
        # One rank has nothing to shard: FSDP2 would still turn every parameter into a DTensor and run its
        # hooks around every forward and backward (~0.25 s of a 0.9 s W1 step, bench/w1.py), so a plain
        # module does the same computation. Its mixed-precision and CPU-offload policies still need FSDP2.
        if mesh.size() > 1 or fsdp.mixed_precision or fsdp.cpu_offload:
            model = apply_fsdp(
                model,
                mesh,
                fsdp.sharding_strategy,
                fsdp.mixed_precision,
                fsdp.cpu_offload,
                fsdp.limit_all_gathers,
                param_dtype=torch.float16 if precision == Precision.fp16 else torch.bfloat16,
            )
        if weights is not None:  # FSDP2's CPU offload keeps the sharded parameters on the host
            load_weights(materialize(model, torch.device("cpu") if fsdp.cpu_offload else device), weights)
        super().__init__(
            model,
            device,
            precision,
            optim_cfg,
            state_dict_fn=full_state_dict,
            loss_scaler=loss_scaler,
            remove_padding=remove_padding,
            fused_kernels=fused_kernels,
            share_prompts=share_prompts,
        )
