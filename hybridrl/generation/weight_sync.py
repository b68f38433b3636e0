"""The one hand-over of trained weights to generation, in hybrid mode and to a rollout pool alike.

The training engine owns the weights version (``TrainEngine.weights_version``, bumped by every optimizer
step and checkpoint load). ``WeightSender`` lives with the actor's engine and remembers which version the
generation side holds, so the decision to send is made in one place, on the actor's workers, in both
layouts:

- hybrid mode: the generation engine is in the same process; the weights stream into it, one full tensor
  at a time in its dtype (``TrainEngine.iter_full_weights``);
- a rollout pool of its own: the weights go over a ``WeightChannel`` from the actor's sending ranks to
  every generation worker, whose ``WeightReceiver`` loads them: each rank's own FSDP shards where every
  rank sends, else the gathered stream shared out among the senders. When nothing changed the sender says so with
  an empty stream and the receivers keep what they hold (a driver-side counter is not needed).

Every hand-over, skipped or not, is a ``weight_sync`` span, so ``timing_s/weight_sync`` is in every step.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from hybridrl.generation.weight_channel import Piece, WeightChannel

if TYPE_CHECKING:
    from hybridrl.engine.base import TrainEngine, WeightShard
    from hybridrl.engine.offload import Offloader
    from hybridrl.generation.engines.base import RolloutEngine

#: A named, timed span (the worker's ``SpanRecorder.span``).
Span = Callable[[str], contextlib.AbstractContextManager]


class WeightSender:
    """The actor's side: hands the engine's weights over when the generation side lacks them."""

    def __init__(
        self,
        engine: TrainEngine,
        dtype: torch.dtype,
        offload: Offloader,
        span: Span,
        target: RolloutEngine | None = None,
    ) -> None:
        """``target``: the generation engine in this process (hybrid mode), or None (a rollout pool: the
        weights go over the channel ``open`` sets up)."""
        self.engine, self.dtype, self.offload, self.span = engine, dtype, offload, span
        self.target = target
        self.channel: WeightChannel | None = None  # held by the rank that sends (the group's first)
        self._held: int | None = None  # the version the generation side holds; None: none, or unknown

    def open(self, channel: WeightChannel | None) -> None:
        """A rollout pool's channel; every rank of the actor gathers, only the one holding ``channel`` sends."""
        self.channel = channel

    @property
    def up_to_date(self) -> bool:
        return self._held == self.engine.weights_version

    def hand_over(self) -> int:
        """Send the weights unless the generation side holds them; the bytes this rank sent or copied."""
        with self.span("weight_sync"):
            if self.up_to_date:
                if self.channel is not None:
                    self.channel.send(())  # an empty stream: the receivers keep their weights
                return 0
            self._held = None  # until the hand-over completes, the generation copy is not valid
            version = self.engine.weights_version
            moved = self._stream()
            self._held = version
            return moved

    def _stream(self) -> int:
        if self.target is not None:
            self.target.resume(keep_weights=False)  # allocated, not copied: every tensor is about to arrive
        with self.offload.resident():
            shards = self._own_shards() if self.target is None else None
            if shards is not None:
                assert self.channel is not None
                return self.channel.send_pieces(Piece(*shard) for shard in shards)
            weights = self.engine.iter_full_weights(self.dtype)
            if self.target is not None:
                moved = [0]
                self.target.load_weights(_counted(weights, moved))
                return moved[0]
            if self.channel is None:  # another rank sends: take part in every tensor's gather
                for _ in weights:
                    pass
                return 0
            return self.channel.send(weights)

    def _own_shards(self) -> Iterator[WeightShard] | None:
        """This rank's shards, where every actor rank sends and the engine can say what it owns: then nothing
        is gathered (the same answer on every rank: the layout and the engine decide it)."""
        world = dist.get_world_size() if dist.is_initialized() else 1
        if self.channel is None or self.channel.senders != world:
            return None
        return self.engine.iter_weight_shards(self.dtype)


class WeightReceiver:
    """A rollout pool worker's side: loads what the actor's first rank streams over the channel."""

    def __init__(self, target: RolloutEngine, span: Span) -> None:
        self.target, self.span = target, span
        self.channel: WeightChannel | None = None
        self.has_weights = False

    def open(self, channel: WeightChannel) -> None:
        self.channel = channel

    def receive(self) -> bool:
        """Load the stream the sender is sending; False when it said nothing changed."""
        assert self.channel is not None, "open the weight channel first"
        with self.span("weight_sync"):
            incoming = self.channel.receive()
            first = next(incoming, None)
            if first is None:
                return False
            self.target.resume(keep_weights=False)
            self.target.load_weights(itertools.chain([first], incoming))
            self.has_weights = True
            return True


def _counted(weights: Iterator[tuple[str, torch.Tensor]], total: list[int]) -> Iterator[tuple[str, torch.Tensor]]:
    """``weights`` as they come, their bytes added to ``total[0]``."""
    for name, tensor in weights:
        total[0] += tensor.numel() * tensor.element_size()
        yield name, tensor
