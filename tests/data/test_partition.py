"""Balanced partitions: token-budget micro-batches and equal-row shards for the data-parallel replicas."""

from __future__ import annotations

import numpy as np
import pytest

from hybridrl.data.partition import balanced_group_partition, balanced_partition, micro_batch_count, token_imbalance

LENGTHS = [int(v) for v in np.random.default_rng(0).integers(8, 257, size=64)]


def test_bins_cover_every_row_once_in_ascending_order():
    bins = balanced_partition(LENGTHS, 5)
    assert sorted(np.concatenate(bins).tolist()) == list(range(len(LENGTHS)))
    assert all((np.diff(b) > 0).all() for b in bins)


def test_equal_size_bins_balance_tokens():
    bins = balanced_partition(LENGTHS, 4, equal_size=True)
    assert [len(b) for b in bins] == [16] * 4
    contiguous = np.array_split(np.arange(len(LENGTHS)), 4)
    assert token_imbalance(LENGTHS, bins) < 1.02 < token_imbalance(LENGTHS, contiguous)
    with pytest.raises(ValueError, match="cannot be split into 3 equal bins"):
        balanced_partition(LENGTHS, 3, equal_size=True)


@pytest.mark.parametrize("budget", [256, 600, 2048, 100_000])
def test_micro_batches_stay_within_the_budget(budget):
    k = micro_batch_count(LENGTHS, budget)
    sums = [sum(LENGTHS[i] for i in b) for b in balanced_partition(LENGTHS, k)]
    assert max(sums) <= budget
    assert k >= -(-sum(LENGTHS) // budget)  # no fewer than the tokens need
    assert micro_batch_count([], budget) == 0


def test_group_bins_keep_each_prompts_samples_together():
    lengths = [9, 9, 1, 1, 5, 5, 4, 4]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d"]
    bins = balanced_group_partition(lengths, groups, 2)
    assert bins is not None and sorted(len(b) for b in bins) == [4, 4]
    for b in bins:
        held = [groups[i] for i in b]
        assert all(held.count(g) == 2 for g in held)  # whole groups only
    assert sorted(sum(lengths[i] for i in b) for b in bins) == [18, 20]  # {a, b} and {c, d}
    assert balanced_group_partition(lengths, groups, 3) is None  # 4 groups do not fill 3 equal bins
    assert balanced_group_partition(lengths[:-1], groups[:-1], 2) is None  # unequal group sizes
