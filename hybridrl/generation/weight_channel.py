"""The weight hand-over between two worker groups: the actor's trained weights to generation-only workers
on a pool of their own (``resource_pool.mapping.rollout``).

Each worker group is a torch.distributed world of its own, so the hand-over needs process groups that span
both, built from a ``TCPStore`` the actor's first rank hosts (``ProcessGroupGloo`` on CPU,
``ProcessGroupNCCL`` on GPU), outside the default group so that neither group's collectives change.

The first ``senders`` actor ranks send; each has a group of its own with every generation worker, so the
senders' transfers run side by side instead of funnelling the whole model through one rank (140 GB a step
at 70B in bf16). Where every actor rank sends and the engine can say what each owns (FSDP's dim-0 shards,
``TrainEngine.iter_weight_shards``), each sends its own shards (``send_pieces``): nothing is gathered, and a
rank sends 1/W of the model. Otherwise (fewer senders, LoRA's merged weights, Megatron's layouts) the actor
ranks gather each full tensor together (``TrainEngine.iter_full_weights``), and each tensor is sent by the
sender given the fewest bytes so far: every actor rank sees the same names and sizes in the same order, so
all make the same choice without a message (``send``). A sender packs its tensors into
buckets of ``bucket_bytes`` (three messages a bucket: header, names and shapes, the bytes) instead of three
messages a tensor, and sends it without waiting while it fills the next (two buckets held at most). A
generation worker receives from every sender at once, one thread per sender, assembles shards into whole
tensors, and loads each as it is complete; no sender holds more than two buckets beyond its shards and the
tensor being gathered.
"""

from __future__ import annotations

import datetime
import json
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.engine.dist import connect_store

_END, _BUCKET = 0, 1
_ALIGN = 16  # every tensor starts at a multiple of this many bytes of its bucket: ``view(dtype)`` needs it


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"weight channel: unknown dtype {name!r} in a bucket")
    return dtype


@dataclass(frozen=True)
class Piece:
    """Rows ``row .. row + len(tensor)`` of the ``rows``-row tensor ``name``: what an FSDP rank owns of a
    weight (its dim-0 shard). The receiver assembles the whole tensor from every sender's pieces."""

    name: str
    tensor: torch.Tensor
    row: int
    rows: int


class _Bucket:
    """A sender's tensors waiting to go, as (name, dtype, shape, offset, bytes, row, rows; row -1: a whole
    tensor) and their byte views."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, list[int], int, int, int, int]] = []
        self.parts: list[torch.Tensor] = []
        self.size = 0

    def add(self, name: str, tensor: torch.Tensor, row: int = -1, rows: int = -1) -> None:
        data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        pad = -self.size % _ALIGN
        if pad:
            self.parts.append(data.new_zeros(pad))
            self.size += pad
        self.entries.append((name, str(tensor.dtype), list(tensor.shape), self.size, data.numel(), row, rows))
        self.parts.append(data)
        self.size += data.numel()

    def payload(self) -> torch.Tensor:
        return torch.cat(self.parts) if self.parts else torch.empty(0, dtype=torch.uint8)


def _wait(posted: tuple[list[Any], list[torch.Tensor]]) -> None:
    for work in posted[0]:
        work.wait()


class _Assembly:
    """Whole tensors from received buckets: a whole tensor as it is, a piece copied into its tensor until
    every row has arrived (from every sender)."""

    def __init__(self) -> None:
        self._partial: dict[str, tuple[torch.Tensor, int]] = {}

    def add(self, meta: torch.Tensor, payload: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        for name, dtype, shape, offset, size, row, rows in json.loads(bytes(meta.cpu().tolist()).decode()):
            tensor = payload[offset : offset + size].view(_dtype(dtype)).reshape(shape)
            if row < 0:
                yield name, tensor  # a view into the bucket: engines copy what they load
                continue
            if shape[0] == 0:  # a rank past the last row (FSDP's chunks): it owns nothing of this tensor
                continue
            whole, filled = self._partial.get(name) or (tensor.new_empty((rows, *shape[1:])), 0)
            whole[row : row + shape[0]].copy_(tensor)
            filled += shape[0]
            if filled == rows:
                self._partial.pop(name, None)
                yield name, whole
            else:
                self._partial[name] = (whole, filled)

    def check_done(self) -> None:
        if self._partial:
            raise RuntimeError(f"weight channel: the senders left {sorted(self._partial)[:4]} incomplete")


@dataclass(frozen=True)
class ChannelPlan:
    """Where a channel's store is and how it is laid out; the driver hands the same plan to both groups."""

    address: str
    port: int
    senders: int
    receivers: int
    bucket_bytes: int
    timeout_s: float

    @property
    def size(self) -> int:
        return self.senders + self.receivers


class WeightChannel:
    """Ranks ``0 .. senders - 1`` send (the actor's first ranks); ranks ``senders ..`` receive (the
    generation workers). ``size``: senders + generation workers."""

    def __init__(
        self,
        address: str,
        port: int,
        rank: int,
        size: int,
        device: torch.device,
        timeout_s: float = 600.0,
        *,
        senders: int = 1,
        bucket_bytes: int = 512 * 2**20,
    ) -> None:
        if not 0 < senders < size:
            raise ValueError(f"weight channel: {senders} senders of {size} ranks; at least one of each is needed.")
        self.rank, self.size, self.device = rank, size, device
        self.senders, self.bucket_bytes = senders, max(1, bucket_bytes)
        self._timeout = datetime.timedelta(seconds=timeout_s)
        # rank 0 hosts the store (``host_store``, called before the address went out); each group's constructor
        # waits until every member has joined
        self._store = connect_store(address, port, timeout_s)  # kept alive: the groups talk through it
        receivers = size - senders
        if rank < senders:  # one group: this sender (its rank 0) and every receiver
            self.groups = [self._group(rank, 0, receivers + 1)]
        else:  # every sender's group, in the senders' order
            self.groups = [self._group(s, 1 + rank - senders, receivers + 1) for s in range(senders)]

    def _group(self, sender: int, rank: int, size: int) -> Any:
        prefixed = dist.PrefixStore(f"hybridrl-weights-{sender}", self._store)
        if self.device.type == "cuda":  # pragma: no cover - needs GPUs
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self._timeout
            return dist.ProcessGroupNCCL(prefixed, rank, size, options)
        return dist.ProcessGroupGloo(prefixed, rank, size, self._timeout)

    @staticmethod
    def _broadcast(group: Any, tensor: torch.Tensor) -> torch.Tensor:
        group.broadcast([tensor], dist.BroadcastOptions()).wait()
        return tensor

    def _header(self, *values: int) -> torch.Tensor:
        return torch.tensor([*values, 0, 0, 0][:3], dtype=torch.int64, device=self.device)

    # -- the senders ----------------------------------------------------------------------------
    def send(self, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Every actor rank of the channel's senders iterates the same ``weights`` (each full tensor, gathered
        together); each sends the ones it is given, in buckets, then the end mark. The bytes this rank sent."""
        loads = [0] * self.senders

        def mine() -> Iterator[Piece]:
            for name, tensor in weights:
                owner = loads.index(min(loads))
                loads[owner] += tensor.numel() * tensor.element_size()
                if owner == self.rank:
                    yield Piece(name, tensor, -1, -1)

        return self._send(mine())

    def send_pieces(self, pieces: Iterable[Piece]) -> int:
        """This sender's own pieces (its shards; every sender sends its own), in buckets, then the end mark."""
        return self._send(piece for piece in pieces if piece.tensor.shape[0] > 0)

    def _send(self, pieces: Iterable[Piece]) -> int:
        assert self.rank < self.senders, "the generation workers receive"
        group = self.groups[0]
        bucket, sent = _Bucket(), 0
        in_flight: list[tuple[list[Any], list[torch.Tensor]]] = []
        for piece in pieces:
            bucket.add(piece.name, piece.tensor.to(self.device), piece.row, piece.rows)
            sent += piece.tensor.numel() * piece.tensor.element_size()
            if bucket.size >= self.bucket_bytes:
                in_flight.append(self._post(group, bucket))
                bucket = _Bucket()
                if len(in_flight) > 1:  # the bucket before goes while this one fills: two at most held
                    _wait(in_flight.pop(0))
        if bucket.entries:
            in_flight.append(self._post(group, bucket))
        in_flight.append(self._post(group, None))
        for posted in in_flight:
            _wait(posted)
        return sent

    def _post(self, group: Any, bucket: _Bucket | None) -> tuple[list[Any], list[torch.Tensor]]:
        """A bucket's three messages (or the end mark) started, not awaited: the sender gathers the next
        tensors meanwhile, and its receivers' thread for it takes them whatever the other senders do.
        Returns the pending works and the tensors they read (alive until they complete)."""
        if bucket is None:
            tensors = [self._header(_END)]
        else:
            meta = torch.tensor(list(json.dumps(bucket.entries).encode()), dtype=torch.uint8, device=self.device)
            payload = bucket.payload()
            tensors = [self._header(_BUCKET, meta.numel(), payload.numel()), meta, payload]
        return [group.broadcast([t], dist.BroadcastOptions()) for t in tensors], tensors

    # -- the generation workers -----------------------------------------------------------------
    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every sender's ``(name, tensor)`` pairs, each yielded as its bucket arrives (on this rank's
        device). One thread per sender receives its buckets, so a sender never waits for another's."""
        assert self.rank >= self.senders, "the senders send"
        # At most one bucket per sender waits here (and one more in each thread): a worker holds up to
        # 2 x senders x bucket_bytes. A full queue holds a thread back, never the loading: no deadlock.
        arrived: queue.Queue[tuple[torch.Tensor, torch.Tensor] | BaseException | None] = queue.Queue(
            maxsize=len(self.groups)
        )
        threads = [threading.Thread(target=self._receive_from, args=(g, arrived), daemon=True) for g in self.groups]
        for thread in threads:
            thread.start()
        open_senders = len(threads)
        assembly = _Assembly()
        while open_senders:
            item = arrived.get()
            if item is None:
                open_senders -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield from assembly.add(*item)
        for thread in threads:
            thread.join()
        assembly.check_done()

    def _receive_from(self, group: Any, arrived: queue.Queue) -> None:
        try:
            while True:
                kind, meta_bytes, payload_bytes = self._broadcast(group, self._header()).tolist()
                if kind == _END:
                    break
                meta = self._broadcast(group, torch.empty(meta_bytes, dtype=torch.uint8, device=self.device))
                payload = self._broadcast(group, torch.empty(payload_bytes, dtype=torch.uint8, device=self.device))
                arrived.put((meta, payload))
        except BaseException as exc:  # handed to the consuming thread, which raises it
            arrived.put(exc)
            return
        arrived.put(None)
