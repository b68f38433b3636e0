"""A rank's place in its worker group (``WorkerContext``) and which rows it gets for a call (``DataLayout``):
what the training engines, the generation side and the roles built on both share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from hybridrl.observability.tracing import SpanRecorder


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
