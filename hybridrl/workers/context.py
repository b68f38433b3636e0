"""What every role on a worker shares: its place in the group (``WorkerContext``), and the contract a role
keeps with the driver (``Role``: which rows each rank gets for a method, as a named ``DataLayout``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import torch

from hybridrl.parallel.engine import TrainEngine
from hybridrl.workers.tracing import SpanRecorder


@dataclass
class WorkerContext:
    rank: int
    world_size: int
    device: torch.device
    mesh: Any
    model_path: str
    tokenizer_path: str
    recorder: SpanRecorder = field(default_factory=SpanRecorder)
    ranks_per_node: int | None = None  # ranks of this group on this rank's node (HYBRID_SHARD's default group)


class DataLayout(NamedTuple):
    """Which rows one rank gets for a method. Ranks of one data-parallel replica (tensor-parallel peers,
    pipeline stages) get the same rows; one of them (``collects``) reports the replica's result back."""

    replica: int
    replicas: int
    collects: bool


class Role(Protocol):
    """A role hosted by a worker: the driver calls its public methods through a typed client
    (``hybridrl.cluster.role_clients``) that declares each method's dispatch."""

    def dp_layout(self, method: str) -> DataLayout: ...


class EngineRole:
    """A role whose every method follows its training engine's data-parallel layout."""

    engine: TrainEngine

    def dp_layout(self, method: str) -> DataLayout:
        return DataLayout(self.engine.dp_rank, self.engine.dp_size, self.engine.collects)
