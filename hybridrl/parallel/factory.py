"""Build a role's training engine from its typed config section: the one place that maps a strategy name to
an engine class (kept apart from both engines so neither imports the other)."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hybridrl.config.choices import Precision, ShardingStrategy, Strategy
from hybridrl.config.schema import RewardModelConfig, TrainedRoleConfig
from hybridrl.models.weights import WeightSource, load_weights, materialize
from hybridrl.parallel.engine import TrainEngine
from hybridrl.parallel.fsdp import apply_fsdp, fsdp_mesh, full_state_dict
from hybridrl.parallel.layout import MegatronLayout
from hybridrl.parallel.megatron_engine import MegatronEngine
from hybridrl.parallel.precision import DynamicLossScaler


def make_engine(
    model: nn.Module,
    section: TrainedRoleConfig | RewardModelConfig,
    *,
    mesh: DeviceMesh,
    device: torch.device,
    train: bool,
    ranks_per_node: int | None = None,
    weights: WeightSource | None = None,
    remove_padding: bool = False,
    fused_kernels: bool = False,
    share_prompts: bool = False,
) -> TrainEngine:
    """Wrap ``model`` with the strategy of its role's ``section``; ``train`` gives it the section's optimizer
    (the reference and reward models are frozen). The reward model's section has no strategy: always FSDP.

    ``mesh`` is the group's 1-D mesh; strategies that need another layout (NO_SHARD, HYBRID_SHARD: 2-D;
    megatron: pp x dp x tp) build it from the same ranks.

    With ``weights``, ``model`` is empty (parameters on the meta device): it is sharded first, then each
    rank allocates and reads only its shards, so no rank ever holds the whole model. ``remove_padding``: the
    model runs on packed rows (``hybridrl.parallel.packing``); ``fused_kernels``: scores come from the hidden
    states (``TrainEngine.model_output``); ``share_prompts``: rows run a shared prompt once (not megatron's
    stages, which run the decoder layers themselves)."""
    trained = section if train and isinstance(section, TrainedRoleConfig) else None
    optim = trained.optim if trained is not None else None
    scaler = None
    if trained is not None and trained.precision == Precision.fp16:
        scaler = DynamicLossScaler(trained.gradient_scale)
    if isinstance(section, TrainedRoleConfig) and section.strategy == Strategy.megatron:
        megatron = section.parallel_config.megatron
        layout = MegatronLayout(mesh.size(), megatron.tp_size, megatron.pp_size, mesh.get_rank())
        return MegatronEngine(
            model,
            layout,
            device,
            sequence_parallel=megatron.sequence_parallel,
            schedule=str(megatron.pp_schedule),
            num_microbatches=megatron.pp_microbatches,
            precision=section.precision,
            optim_cfg=optim,
            loss_scaler=scaler,
            weights=weights,
            remove_padding=remove_padding,
        )
    fsdp = section.fsdp
    if fsdp.sharding_strategy in (ShardingStrategy.NO_SHARD, ShardingStrategy.HYBRID_SHARD):
        group = fsdp.shard_group_size or ranks_per_node or mesh.size()
        mesh = fsdp_mesh(device.type, mesh.size(), fsdp.sharding_strategy, group)
    if weights is None:
        model = model.to(device)
    # One rank has nothing to shard: FSDP2 would still turn every parameter into a DTensor and run its hooks
    # around every forward and backward (~0.25 s of a 0.9 s W1 step, bench/w1.py), so a plain module does
    # the same computation. Its mixed-precision and CPU-offload policies still need FSDP2.
    if mesh.size() > 1 or fsdp.mixed_precision or fsdp.cpu_offload:
        model = apply_fsdp(
            model,
            mesh,
            fsdp.sharding_strategy,
            fsdp.mixed_precision,
            fsdp.cpu_offload,
            fsdp.limit_all_gathers,
            param_dtype=torch.float16 if section.precision == Precision.fp16 else torch.bfloat16,
        )
    if weights is not None:  # FSDP2's CPU offload keeps the sharded parameters on the host
        load_weights(materialize(model, torch.device("cpu") if fsdp.cpu_offload else device), weights)
    return TrainEngine(
        model,
        device,
        section.precision,
        optim,
        state_dict_fn=full_state_dict,
        loss_scaler=scaler,
        remove_padding=remove_padding,
        fused_kernels=fused_kernels,
        share_prompts=share_prompts,
    )
