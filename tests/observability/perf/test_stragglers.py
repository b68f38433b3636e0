import math

from hybridrl.observability.perf.stragglers import Straggler, find_stragglers, format_warning


def test_flags_slowest_rank_against_median_of_others():
    found = find_stragglers({"update_actor": [0.70, 2.31, 0.72, 0.74], "generate": [1.0, 1.1, 1.2, 1.3]}, factor=2.0)
    assert found == [Straggler("update_actor", 1, 2.31, 0.72, 2.0)]


def test_two_ranks_can_be_flagged():
    assert find_stragglers({"c": [0.1, 0.5]}, factor=2.0) == [Straggler("c", 1, 0.5, 0.1, 2.0)]


def test_min_seconds_and_threshold():
    assert find_stragglers({"tiny": [0.001, 0.04]}, factor=2.0) == []  # below min_seconds
    assert find_stragglers({"c": [1.0, 2.0, 1.0]}, factor=2.0) == []  # exactly 2x: not more
    assert find_stragglers({"c": [1.0]}, factor=2.0) == []  # single rank
    assert find_stragglers({"c": [0.0, 0.2, 0.0]}, factor=2.0)[0].ratio == math.inf


def test_nan_ranks_ignored():
    assert find_stragglers({"c": [1.0, math.nan, 3.0]}, factor=2.0) == [Straggler("c", 2, 3.0, 1.0, 2.0)]


def test_format_warning():
    s = Straggler("update_actor", 1, 2.31, 0.72, 2.0)
    assert format_warning("actor_rollout", s) == (
        "role actor_rollout rank 1 took 2.31 s in update_actor, 3.2x the median 0.72 s (trainer.straggler_factor=2.0)"
    )
