"""verl's batch reward manager: the custom function is called once per batch with lists, in the driver or
in a reward process, and a failed call fails every sample of the batch."""

from __future__ import annotations

import textwrap

import pytest

from hybridrl.rewards.custom import CustomRewardError, check_reward_file, load_reward_fn
from hybridrl.rewards.registry import RewardError
from hybridrl.rewards.scorer import RewardScorer

BATCHED = """
    import os

    CALLS = []

    def compute_score(data_sources, solution_strs, ground_truths, extra_infos=None):
        if "crash" in solution_strs:
            os._exit(9)
        if "short" in solution_strs:
            return [1.0]
        if "raise" in solution_strs:
            raise ValueError("the judge is down")
        CALLS.append(len(solution_strs))
        return [
            {"score": float(s == t), "acc": s == t, "calls": len(CALLS)}
            for s, t in zip(solution_strs, ground_truths)
        ]
"""


@pytest.fixture
def batch_file(tmp_path):
    path = tmp_path / "batched.py"
    path.write_text(textwrap.dedent(BATCHED))
    return str(path)


def make(batch_file, num_workers, on_error="raise"):
    fn = load_reward_fn(batch_file, batch=True)
    return RewardScorer(fn, on_error, -1.0, num_workers=num_workers, timeout_s=60.0, one_call=True)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_one_call_per_batch_with_lists_and_dict_extras(batch_file, num_workers):
    scorer = make(batch_file, num_workers)
    try:
        first = scorer.score(["a", "b", "c"], ["1", "2", "3"], ["1", "0", "3"], [None, None, None])
        second = scorer.score(["a"], ["5"], ["5"])
    finally:
        scorer.close()
    assert first.scores == [1.0, 0.0, 1.0] and first.failed == 0
    assert first.extras["acc"] == [1.0, 0.0, 1.0]
    assert first.extras["calls"] == [1.0, 1.0, 1.0]  # the three samples came in one call
    assert second.extras["calls"] == [2.0]


@pytest.mark.parametrize("num_workers", [0, 1])
def test_a_wrong_length_names_the_function_and_the_contract(batch_file, num_workers):
    scorer = make(batch_file, num_workers)
    try:
        with pytest.raises(RewardError, match=r"returned list of 1 for a batch of 2 samples; it must return a list"):
            scorer.score(["a", "a"], ["short", "x"], ["1", "1"])
    finally:
        scorer.close()


def test_a_failed_call_fails_every_sample_of_the_batch(batch_file):
    scorer = make(batch_file, 1, on_error="fail")
    try:
        raised = scorer.score(["a", "a"], ["raise", "x"], ["1", "1"])
        crashed = scorer.score(["a", "a", "a"], ["crash", "x", "y"], ["1", "1", "1"])
        after = scorer.score(["a"], ["7"], ["7"])  # the dead process was replaced
    finally:
        scorer.close()
    assert raised.scores == [-1.0, -1.0] and raised.failed == 2
    assert crashed.scores == [-1.0] * 3 and crashed.failed == 3
    assert after.scores == [1.0]


def test_the_file_check_wants_the_batch_parameters(tmp_path, batch_file):
    check_reward_file(batch_file, batch=True)
    single = tmp_path / "single.py"
    single.write_text("def compute_score(data_source, solution_str, ground_truth):\n    return 0.0\n")
    with pytest.raises(CustomRewardError, match=r"data_sources, solution_strs, ground_truths, extra_infos"):
        check_reward_file(str(single), batch=True)
