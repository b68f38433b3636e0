"""What a worker reports about each call besides its result: timed spans and resource use."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Span:
    """A named interval on one worker, in wall-clock seconds since the epoch (comparable across hosts)."""

    name: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class CallResult:
    """A group call's result on one rank: the value, the call's span, sub-spans inside it, resources."""

    value: Any
    span: Span
    sub_spans: list[Span] = field(default_factory=list)
    resources: dict[str, float] = field(default_factory=dict)


class SpanRecorder:
    """Collects spans during a call; roles add sub-spans (e.g. the weight hand-over) through it."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device
        self._spans: list[Span] = []

    @contextlib.contextmanager
    def span(self, name: str) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            synchronize(self.device)  # GPU work is asynchronous: time it when it is done
            self._spans.append(Span(name, start, time.time()))

    def drain(self) -> list[Span]:
        spans, self._spans = self._spans, []
        return spans


def synchronize(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
