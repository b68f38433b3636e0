"""Reward functions in child processes: a hang, a crash or an exit in user code is one sample's failure."""

from __future__ import annotations

import textwrap

import pytest

from hybridrl.rewards.custom import load_reward_fn
from hybridrl.rewards.registry import RewardError
from hybridrl.rewards.scorer import RewardScorer

MISBEHAVING = """
    import ctypes, os, sys, time

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "hang":
            time.sleep(3600)
        if solution_str == "segfault":
            ctypes.string_at(0)
        if solution_str == "os_exit":
            os._exit(7)
        if solution_str == "sys_exit":
            sys.exit(3)
        if solution_str == "raise":
            raise KeyError("no answer")
        if solution_str == "none":
            return None
        if solution_str == "dict":
            return {"score": 0.25, "acc": True, "note": "text is dropped"}
        return float(solution_str == ground_truth)
"""


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "misbehaving.py"
    path.write_text(textwrap.dedent(MISBEHAVING))
    return str(path)


def scorer(reward_file, on_error="raise", num_workers=2, timeout_s=60.0):
    return RewardScorer(load_reward_fn(reward_file), on_error, -1.0, num_workers=num_workers, timeout_s=timeout_s)


def score(s, responses):
    scored = s.score(["src"] * len(responses), responses, ["42"] * len(responses))
    return scored.scores, scored.failed


def test_scores_match_the_in_process_scorer_in_order(reward_file):
    responses = [str(40 + i % 4) for i in range(37)]
    in_process = scorer(reward_file, num_workers=0)
    processes = scorer(reward_file, num_workers=3)
    try:
        assert score(processes, responses) == score(in_process, responses)
        assert score(processes, ["42"]) == ([1.0], 0)  # the processes stay for the next batch
    finally:
        processes.close()


@pytest.mark.parametrize(
    "response,message",
    [
        (
            "segfault",
            r"The reward process scoring sample 1 \(data_source='src', response='segfault'\) with "
            r"compute_score \(from .*misbehaving.py\) died \(killed by SIGSEGV\)",
        ),
        ("os_exit", r"sample 1 .* died \(exit code 7\)"),
        ("sys_exit", r"compute_score \(from .*\) raised on sample 1 .*: SystemExit: 3"),
        ("raise", r"raised on sample 1 .*: KeyError: 'no answer'"),
        ("none", r"returned None for sample 1 \(data_source='src'\); it must return a finite float"),
    ],
)
def test_a_failure_is_one_line_naming_the_sample(reward_file, response, message):
    raising, failing = scorer(reward_file), scorer(reward_file, on_error="fail")
    try:
        with pytest.raises(RewardError, match=message) as info:
            score(raising, ["42", response, "41"])
        assert "\n" not in str(info.value)
        assert score(failing, ["42", response, "41"]) == ([1.0, -1.0, 0.0], 1)  # scored as failed, counted
        assert score(failing, ["42"]) == ([1.0], 0)  # a dead process was replaced
    finally:
        raising.close()
        failing.close()


def test_a_hanging_reward_fails_at_the_deadline_and_the_next_batch_scores(reward_file):
    s = scorer(reward_file, on_error="fail", num_workers=1, timeout_s=1.0)
    try:
        with pytest.raises(RewardError, match=r"did not return within reward.timeout_s=1 s on sample 0 .*'hang'"):
            scorer_raise = scorer(reward_file, num_workers=1, timeout_s=1.0)
            try:
                score(scorer_raise, ["hang"])
            finally:
                scorer_raise.close()
        assert score(s, ["hang", "42"]) == ([-1.0, -1.0], 2)  # the hang, and the sample it kept waiting
        s.processes.timeout_s = 60.0
        assert score(s, ["42", "41"]) == ([1.0, 0.0], 0)
    finally:
        s.close()


def test_a_function_that_cannot_travel_is_named():
    s = RewardScorer(lambda ds, r, gt, extra=None: 1.0, num_workers=1)
    try:
        with pytest.raises(RewardError, match=r"cannot be sent to the reward processes .* reward.num_workers=0"):
            score(s, ["42"])
    finally:
        s.close()


def test_dict_returns_carry_extra_metrics_from_the_processes(reward_file):
    s = scorer(reward_file, num_workers=1)
    try:
        scored = s.score(["src"] * 3, ["dict", "42", "dict"], ["42"] * 3)
        assert scored.scores == [0.25, 1.0, 0.25] and list(scored.extras) == ["acc"]
        assert scored.extras["acc"][0] == 1.0 and scored.extras["acc"][2] == 1.0
        assert scored.extras["acc"][1] != scored.extras["acc"][1]  # NaN: that sample returned a number
    finally:
        s.close()
