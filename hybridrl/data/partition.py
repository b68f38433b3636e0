"""Balanced partitions of sequences by their token counts: token-budget micro-batches on a worker (verl's
``use_dynamic_bsz``) and equal-row, equal-token shards for the data-parallel replicas (``balance_batch``).

With ragged responses a fixed row count gives micro-batches and replicas very different amounts of work:
the slowest replica sets the step time, and the longest micro-batch sets peak memory. Greedy "largest
first into the lightest bin" is within 4/3 of the optimal makespan, enough here; written by hand since no
library we depend on offers it (verl has its own Karmarkar-Karp for the same job).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np


def balanced_partition(lengths: Sequence[int], k: int, *, equal_size: bool = False) -> list[np.ndarray]:
    """``k`` bins of row indices with token sums as even as the greedy gets, each in ascending row order.
    ``equal_size``: every bin gets ``len(lengths) / k`` rows (which must divide)."""
    n = len(lengths)
    if k <= 0:
        raise ValueError(f"k must be positive, got {k}")
    if equal_size and n % k:
        raise ValueError(f"{n} rows cannot be split into {k} equal bins")
    capacity = n // k if equal_size else n
    heap = [(0, b) for b in range(k)]  # (tokens, bin)
    bins: list[list[int]] = [[] for _ in range(k)]
    for row in sorted(range(n), key=lambda i: (-int(lengths[i]), i)):
        tokens, b = heapq.heappop(heap)
        bins[b].append(row)
        if len(bins[b]) < capacity:  # a full bin leaves the heap
            heapq.heappush(heap, (tokens + int(lengths[row]), b))
    return [np.asarray(sorted(b), dtype=np.int64) for b in bins]


def balanced_group_partition(lengths: Sequence[int], groups: Sequence[object], k: int) -> list[np.ndarray] | None:
    """As ``balanced_partition(equal_size=True)``, moving whole groups (rows with the same ``groups`` id: a
    prompt's samples), so that each replica can run a shared prompt once (``use_prefix_grouper``); None
    when the groups cannot fill ``k`` equal bins (unequal group sizes, or a count ``k`` does not divide)."""
    members: dict[object, list[int]] = {}
    for row, group in enumerate(groups):
        members.setdefault(group, []).append(row)
    rows = list(members.values())
    if len({len(r) for r in rows}) != 1 or len(rows) % k:
        return None
    group_tokens = [sum(int(lengths[i]) for i in r) for r in rows]
    return [
        np.asarray(sorted(i for g in b for i in rows[g]), dtype=np.int64)
        for b in balanced_partition(group_tokens, k, equal_size=True)
    ]


def micro_batch_count(lengths: Sequence[int], max_tokens: int) -> int:
    """The fewest balanced micro-batches whose token sums all stay within ``max_tokens`` (each row must
    fit on its own; at most one micro-batch per row)."""
    if not len(lengths):
        return 0
    k = max(1, math.ceil(sum(int(v) for v in lengths) / max_tokens))
    while k < len(lengths) and max(_bin_tokens(lengths, balanced_partition(lengths, k))) > max_tokens:
        k += 1
    return k


def _bin_tokens(lengths: Sequence[int], bins: list[np.ndarray]) -> list[int]:
    values = np.asarray(lengths, dtype=np.int64)
    return [int(values[b].sum()) for b in bins]


def token_imbalance(lengths: Sequence[int], bins: list[np.ndarray]) -> float:
    """The largest bin's tokens over the mean bin's: 1.0 is perfectly even."""
    sums = _bin_tokens(lengths, bins)
    mean = sum(sums) / max(len(sums), 1)
    return max(sums) / mean if mean else 1.0
