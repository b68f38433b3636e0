"""Ulysses sequence parallelism (DeepSpeed-Ulysses, verl's ``ulysses_sequence_parallel_size``) inside attention.

Each of the ``size`` ranks of a sequence-parallel group holds a contiguous 1/size of a packed sequence through
the whole model; only attention needs every token. Around it, one all-to-all trades the sequence shard for a
head shard (each rank then holds every token of 1/size of the heads), attention runs per document as it does
unsharded (``hybridrl.models.packed_attention``), and a second all-to-all trades back. Per layer and rank that
moves 4 x tokens/size x hidden values (q, k, v out; the output back), against activations of every token of
the sequence on every rank without it.

Grouped-query attention with fewer key/value heads than ranks repeats each key/value head to ``size`` heads
before the exchange (verl does the same); the head counts are checked before launch
(``ulysses_fit_errors``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

#: The attribute an attention module carries when its layer runs sequence-parallel: a ``SequenceShard``.
SHARD_ATTRIBUTE = "_hybridrl_sequence_shard"


def ulysses_fit_errors(at: str, size: int, workers: int, num_heads: int, num_kv_heads: int) -> list[str]:
    """Why ``size``-way Ulysses cannot run this model on ``workers`` ranks (empty when it can)."""
    errors = []
    if workers % size:
        errors.append(f"{at}.ulysses_sequence_parallel_size={size} must divide the role's {workers} workers.")
    if num_heads % size:
        errors.append(
            f"{at}.ulysses_sequence_parallel_size={size} must divide the model's {num_heads} attention heads "
            f"(each rank attends with heads / size of them)."
        )
    if num_kv_heads % size and size % num_kv_heads:
        errors.append(
            f"{at}.ulysses_sequence_parallel_size={size} and the model's {num_kv_heads} key/value heads: one must "
            f"divide the other (fewer key/value heads than ranks are repeated to one per rank)."
        )
    return errors


class _AllToAll(torch.autograd.Function):
    """``dist.all_to_all_single`` over dimension 0 (``size`` equal chunks), with its own adjoint in backward.

    Written here because torch.distributed.nn's autograd collectives are deprecated and the functional ones
    (``_functional_collectives``) are private API."""

    @staticmethod
    def forward(ctx: Any, chunks: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        chunks = chunks.contiguous()  # the collective reads and writes dense memory: no strided views
        out = torch.empty_like(chunks)
        dist.all_to_all_single(out, chunks, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


@dataclass(frozen=True)
class SequenceShard:
    """This rank's place in its sequence-parallel group: the group, its size and this rank's index in it."""

    group: Any
    size: int
    rank: int

    def heads_to_sequence(self, x: torch.Tensor) -> torch.Tensor:
        """(1, heads, tokens / size, D) of this rank's tokens -> (tokens, heads / size, D): every token of the
        group's sequence, for this rank's heads."""
        _, heads, local, dim = x.shape
        chunks = x[0].reshape(self.size, heads // self.size, local, dim)  # chunk j: the heads rank j takes
        received = _AllToAll.apply(chunks, self.group)  # chunk i: rank i's tokens for this rank's heads
        return received.permute(0, 2, 1, 3).reshape(self.size * local, heads // self.size, dim)

    def sequence_to_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(tokens, heads / size, D) -> (1, tokens / size, heads, D): the inverse exchange, output layout."""
        tokens, heads, dim = x.shape
        local = tokens // self.size
        received = _AllToAll.apply(x.reshape(self.size, local, heads, dim), self.group)  # chunk i: rank i's heads
        return received.permute(1, 0, 2, 3).reshape(1, local, self.size * heads, dim)

    def repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        """(1, Hkv, L, D) key/value heads repeated to ``size`` when fewer than the ranks: each rank's query
        heads then find their one key/value head in their own head shard."""
        heads = x.shape[1]
        return x if heads % self.size == 0 else x.repeat_interleave(self.size // heads, dim=1)

    def positions(self, local: torch.Tensor) -> torch.Tensor:
        """The group's whole (1, tokens) position ids from this rank's (1, tokens / size) slice."""
        local = local.contiguous()
        parts = [torch.empty_like(local) for _ in range(self.size)]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat(parts, dim=-1)


def attach(model: nn.Module, shard: SequenceShard) -> int:
    """Make every attention layer of ``model`` run sequence-parallel over ``shard`` (they must use the packed
    attention implementation); returns how many layers were found."""
    layers = 0
    for module in model.modules():
        if hasattr(module, "head_dim") and hasattr(module, "layer_idx") and isinstance(module, nn.Module):
            setattr(module, SHARD_ATTRIBUTE, shard)
            layers += 1
    return layers


def shard_of(module: nn.Module) -> SequenceShard | None:
    return getattr(module, SHARD_ATTRIBUTE, None)
