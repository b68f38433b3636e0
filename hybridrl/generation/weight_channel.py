"""The weight hand-over between two worker groups: the actor's trained weights to generation-only workers
on a pool of their own (``resource_pool.mapping.rollout``).

Each worker group is a torch.distributed world of its own, so the hand-over needs a process group that
spans both: the actor's first rank plus every generation worker, built from a ``TCPStore`` the actor's
first rank hosts (``ProcessGroupGloo`` on CPU, ``ProcessGroupNCCL`` on GPU), outside the default group
so that neither group's collectives change. As verl's one-step-off-policy recipe does, the actor's first
rank broadcasts one full tensor at a time: the actor ranks gather it together
(``TrainEngine.iter_full_weights``), so no rank ever holds more than one full tensor beyond its shards,
and each generation worker copies it into its engine as it arrives. Every tensor is preceded by a small
header (name, dtype, shape), so the receiver needs no list of the weights and any engine's names work.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist

from hybridrl.engine.dist import connect_store

DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float64,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
]
MAX_DIMS = 6
_END, _TENSOR = 0, 1
_HEADER = 4 + MAX_DIMS  # kind, dtype, dims, name bytes, shape


class WeightChannel:
    """Rank 0 sends (the actor's first rank); ranks 1.. receive (the generation workers)."""

    def __init__(
        self, address: str, port: int, rank: int, size: int, device: torch.device, timeout_s: float = 600.0
    ) -> None:
        timeout = datetime.timedelta(seconds=timeout_s)
        # rank 0 hosts the store (``host_store``, called before the address went out); the group's constructor
        # waits until every rank has joined
        store = connect_store(address, port, timeout_s)
        prefixed = dist.PrefixStore("hybridrl-weights", store)
        self.rank, self.size, self.device = rank, size, device
        self._store = store  # kept alive: the group talks through it
        self.group: Any
        if device.type == "cuda":  # pragma: no cover - needs GPUs
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = timeout
            self.group = dist.ProcessGroupNCCL(prefixed, rank, size, options)
        else:
            self.group = dist.ProcessGroupGloo(prefixed, rank, size, timeout)

    def _broadcast(self, tensor: torch.Tensor) -> torch.Tensor:
        self.group.broadcast([tensor], dist.BroadcastOptions()).wait()
        return tensor

    def send(self, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Broadcast each ``(name, tensor)`` as it comes, then the end mark; the bytes sent."""
        assert self.rank == 0, "only the channel's first rank sends"
        sent = 0
        for name, tensor in weights:
            if tensor.dim() > MAX_DIMS:
                raise ValueError(f"{name}: {tensor.dim()} dimensions; the weight channel carries up to {MAX_DIMS}.")
            encoded = torch.tensor(list(name.encode()), dtype=torch.uint8, device=self.device)
            header = [_TENSOR, DTYPES.index(tensor.dtype), tensor.dim(), len(encoded), *tensor.shape]
            self._broadcast(self._header(header))
            self._broadcast(encoded)
            self._broadcast(tensor.to(self.device).contiguous())
            sent += tensor.numel() * tensor.element_size()
        self._broadcast(self._header([_END, 0, 0, 0]))
        return sent

    def receive(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The sender's ``(name, tensor)`` pairs, each yielded as it arrives (on this rank's device)."""
        assert self.rank > 0, "the channel's first rank sends"
        while True:
            kind, dtype, dims, name_bytes, *shape = self._broadcast(self._header([])).tolist()
            if kind == _END:
                return
            name = bytes(self._broadcast(torch.empty(name_bytes, dtype=torch.uint8, device=self.device)).tolist())
            tensor = torch.empty(shape[:dims], dtype=DTYPES[dtype], device=self.device)
            yield name.decode(), self._broadcast(tensor)

    def _header(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values + [0] * (_HEADER - len(values)), dtype=torch.int64, device=self.device)
