"""The contract a role keeps with the driver (``Role``: which rows each rank gets for a method, as a
``DataLayout``) and the roles built on a training engine (``EngineRole``, ``build_engine``)."""

from __future__ import annotations

from typing import Any, Protocol

from hybridrl.config.schema import RewardModelConfig, TrainedRoleConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.context import DataLayout, WorkerContext
from hybridrl.engine.factory import make_engine
from hybridrl.engine.lr_schedule import LRSchedule
from hybridrl.engine.offload import Offloader
from hybridrl.models.weights import WeightSource


class Role(Protocol):
    """A role hosted by a worker: the driver calls its public methods through a typed client
    (``hybridrl.cluster.role_clients``) that declares each method's dispatch."""

    def dp_layout(self, method: str) -> DataLayout: ...


class EngineRole:
    """A role whose every method follows its training engine's data-parallel layout, and whose engine
    waits in host memory between its phases where ``offload`` says so."""

    engine: TrainEngine
    offload: Offloader

    def dp_layout(self, method: str) -> DataLayout:
        return DataLayout(self.engine.dp_rank, self.engine.dp_size, self.engine.collects)


def build_engine(
    model: Any,
    weights: WeightSource,
    section: TrainedRoleConfig | RewardModelConfig,
    ctx: WorkerContext,
    *,
    train: bool,
    what: str,
    param_offload: bool,
    optimizer_offload: bool = False,
    remove_padding: bool = False,
    fused_kernels: bool = False,
    total_steps: int = 1,
    sequence_parallel: int = 1,
) -> tuple[TrainEngine, Offloader]:
    """A role's engine from its empty ``model`` (sharded, then filled from ``weights``), and the offloader
    that keeps it in host memory between the role's phases (the role offloads it once it is ready). A
    trained role's learning rate follows its ``optim`` schedule over ``total_steps`` training steps.
    ``sequence_parallel``: the role's Ulysses group size (``ulysses_sequence_parallel_size``)."""
    engine = make_engine(
        model,
        section,
        mesh=ctx.mesh,
        device=ctx.device,
        train=train,
        ranks_per_node=ctx.ranks_per_node,
        weights=weights,
        remove_padding=remove_padding,
        fused_kernels=fused_kernels,
        share_prompts=isinstance(section, TrainedRoleConfig) and section.use_prefix_grouper,
        sequence_parallel=sequence_parallel,
    )
    if not train:
        engine.model.eval()
    elif isinstance(section, TrainedRoleConfig):
        engine.set_lr_schedule(LRSchedule.from_config(section.optim, total_steps))
    offload = Offloader(
        engine.model,
        engine.optimizer,
        ctx.device,
        params=param_offload,
        optimizer_state=optimizer_offload,
        what=what,
        span=ctx.recorder.span,
    )
    return engine, offload
