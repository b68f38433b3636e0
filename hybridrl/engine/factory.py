"""Build a role's training engine from its typed config section: the one place that maps a strategy name to
an engine class (kept apart from the engines so neither imports the other). Each engine applies its own
parallelism in its constructor, from an empty (meta-device) or single-device model."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hybridrl.config.choices import Precision, Strategy
from hybridrl.config.schema import RewardModelConfig, TrainedRoleConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.fsdp.engine import FSDPEngine
from hybridrl.engine.megatron.engine import MegatronEngine
from hybridrl.engine.megatron.layout import MegatronLayout
from hybridrl.engine.precision import DynamicLossScaler
from hybridrl.models.weights import WeightSource


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
    sequence_parallel: int = 1,
) -> TrainEngine:
    """Wrap ``model`` with the strategy of its role's ``section``; ``train`` gives it the section's optimizer
    (the reference and reward models are frozen). The reward model's section has no strategy: always FSDP.

    ``mesh`` is the group's 1-D mesh; strategies that need another layout (NO_SHARD, HYBRID_SHARD: 2-D;
    megatron: pp x dp x tp) build it from the same ranks. With ``weights``, ``model`` is empty (parameters
    on the meta device) and each rank reads only its shards. ``remove_padding``: the model runs on packed
    rows (``hybridrl.engine.packing``); ``fused_kernels``: scores come from the hidden states
    (``TrainEngine.model_output``); ``share_prompts``: rows run a shared prompt once (not megatron's stages,
    which run the decoder layers themselves); ``sequence_parallel``: FSDP's Ulysses group size."""
    trained = section if train and isinstance(section, TrainedRoleConfig) else None
    optim = trained.optim if trained is not None else None
    scaler = None
    if trained is not None and trained.precision == Precision.fp16:
        scaler = DynamicLossScaler(trained.gradient_scale)
    if isinstance(section, TrainedRoleConfig) and section.strategy == Strategy.megatron:
        if sequence_parallel > 1:
            raise ValueError("ulysses_sequence_parallel_size > 1 needs strategy=fsdp.")
        megatron = section.parallel_config.megatron
        return MegatronEngine(
            model,
            MegatronLayout(mesh.size(), megatron.tp_size, megatron.pp_size, mesh.get_rank()),
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
    return FSDPEngine(
        model,
        section.fsdp,
        mesh,
        device,
        ranks_per_node=ranks_per_node,
        precision=section.precision,
        optim_cfg=optim,
        loss_scaler=scaler,
        weights=weights,
        remove_padding=remove_padding,
        fused_kernels=fused_kernels,
        share_prompts=share_prompts,
        sequence_parallel=sequence_parallel,
    )
