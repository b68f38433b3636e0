"""Ulysses sequence parallelism on the FSDP engine (verl's ``ulysses_sequence_parallel_size``): which rows and
which tokens of them each rank computes, and the per-token outputs gathered back.

Ranks are grouped in consecutive blocks of ``size``: a block is one data-parallel replica (it gets one share
of the rows, and its first rank reports the result), and each rank of it runs a contiguous 1/size of every
packed micro-batch through the model (attention exchanges heads for tokens: ``hybridrl.models.ulysses``).
FSDP still shards the parameters over every rank. Only per-token results are gathered (log-probs and
entropy from the output head's hidden states, or values), never the logits: at 32k response tokens and a
150k vocabulary those would be 9.8 GB per rank in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from hybridrl.engine.packing import PackedRows, pad_packed
from hybridrl.models.ulysses import SequenceShard


@dataclass(frozen=True)
class UlyssesLayout:
    """Where one rank sits: replica ``rank // size``, position ``rank % size`` along the sequence."""

    world_size: int
    size: int
    rank: int

    @property
    def dp_size(self) -> int:
        return self.world_size // self.size

    @property
    def dp_rank(self) -> int:
        return self.rank // self.size

    @property
    def sp_rank(self) -> int:
        return self.rank % self.size

    @property
    def collects(self) -> bool:
        return self.sp_rank == 0


def ulysses_mesh(device_type: str, layout: UlyssesLayout) -> DeviceMesh:
    """The (dp, sp) mesh over the group's ranks (every rank must call this in the same order)."""
    if layout.world_size % layout.size:
        raise ValueError(
            f"ulysses_sequence_parallel_size={layout.size} must divide the role's {layout.world_size} workers."
        )
    return init_device_mesh(device_type, (layout.dp_size, layout.size), mesh_dim_names=("dp", "sp"))


@dataclass(frozen=True)
class SequenceSlice:
    """One packed micro-batch cut for this rank: its tokens ``[start, stop)`` of the sequence padded to a
    multiple of the group size; with responses, the response-predicting positions among them (``keep``,
    relative to ``start``), which of all K such positions they are (``mine``), and how many each rank of
    the group has (``counts``)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    start: int
    stop: int
    token_counts: list[int]
    keep: torch.Tensor | None = None
    mine: torch.Tensor | None = None
    counts: list[int] | None = None


def slice_packed(rows: PackedRows, shard: SequenceShard) -> SequenceSlice:
    """This rank's contiguous share of ``rows`` (padded on the right as a continuation of the last row, so
    that causal attention leaves every real token's output unchanged)."""
    padded = -(-rows.num_tokens // shard.size) * shard.size
    ids, pos = pad_packed(rows.input_ids, rows.position_ids, padded)
    local = padded // shard.size
    start, stop = shard.rank * local, (shard.rank + 1) * local
    token_counts = [local] * shard.size
    if rows.response_index is None:
        return SequenceSlice(ids[:, start:stop], pos[:, start:stop], start, stop, token_counts)
    index = rows.response_index
    bounds = torch.arange(shard.size + 1, device=index.device) * local
    edges = torch.searchsorted(index, bounds).tolist()  # response positions are ascending in packed order
    counts = [b - a for a, b in zip(edges[:-1], edges[1:])]
    mine = torch.arange(edges[shard.rank], edges[shard.rank + 1], device=index.device)
    return SequenceSlice(
        ids[:, start:stop], pos[:, start:stop], start, stop, token_counts, index[mine] - start, mine, counts
    )


class _GatherSequence(torch.autograd.Function):
    """Each rank's (1, n_r, ...) piece -> the group's (1, sum n_r, ...), in rank order.

    Backward: every rank of the group computes the same loss from the gathered tensor, so the gradients of
    the whole are summed over the group before each rank takes its piece's. A replica's ranks then hold
    ``size`` times their share of its gradient, and FSDP's average over all replicas x size ranks is the
    average over replicas, as without sequence parallelism (verl scales the same way)."""

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor, counts: list[int], shard: SequenceShard) -> torch.Tensor:
        ctx.counts, ctx.shard = counts, shard
        longest = max(counts)
        padded = local.new_zeros((local.shape[0], longest, *local.shape[2:]))
        padded[:, : local.shape[1]] = local
        parts = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(parts, padded.contiguous(), group=shard.group)
        return torch.cat([part[:, :n] for part, n in zip(parts, counts)], dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.shard.group)
        start = sum(ctx.counts[: ctx.shard.rank])
        return grad[:, start : start + ctx.counts[ctx.shard.rank]], None, None


def gather_sequence(local: torch.Tensor, counts: list[int], shard: SequenceShard) -> torch.Tensor:
    """The group's per-token outputs along dimension 1 (``counts``: each rank's length), differentiable."""
    return _GatherSequence.apply(local, counts, shard)
