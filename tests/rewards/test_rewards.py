import itertools
import math
import sys

import pytest

from hybridrl.data.tasks import make_task
from hybridrl.rewards.registry import REWARD_FNS, RewardError, register_reward, score_batch


def test_copy_reward_partial_credit():
    assert score_batch(["copy"] * 4, ["314", "310", "3", "999"], ["314"] * 4) == [1.0, 2 / 3, 1 / 3, 0.0]


def test_no_constant_response_scores_above_0_2():
    task = make_task("copy", num_digits=3)
    examples = task.examples(500, seed=0)
    for answer in ("".join(p) for p in itertools.product("0123456789", repeat=1)):
        for constant in (answer * 3, answer, ""):
            mean = sum(
                score_batch(
                    [e.data_source for e in examples], [constant] * len(examples), [e.ground_truth for e in examples]
                )
            ) / len(examples)
            assert mean <= 0.2, (constant, mean)


def test_reverse_task_ground_truth():
    ex = make_task("reverse", num_digits=3).examples(1, seed=3)[0]
    assert ex.ground_truth == ex.prompt[:-1][::-1]


@pytest.fixture
def bad_rewards():
    def raising(ds, s, gt, extra):
        raise ZeroDivisionError("boom")

    def exiting(ds, s, gt, extra):
        sys.exit(3)

    register_reward("t_raise")(raising)
    register_reward("t_exit")(exiting)
    register_reward("t_nan")(lambda ds, s, gt, extra: math.nan)
    register_reward("t_str")(lambda ds, s, gt, extra: "1.0")
    yield
    for name in ("t_raise", "t_exit", "t_nan", "t_str"):
        REWARD_FNS.pop(name)


def test_reward_failures_name_function_and_sample(bad_rewards):
    with pytest.raises(RewardError, match=r"raising raised on sample 1 .*ZeroDivisionError: boom"):
        score_batch(["copy", "t_raise"], ["1", "2"], ["1", "2"])
    # sys.exit in a reward is a reward failure like any other, not the silent end of the run
    with pytest.raises(RewardError, match=r"exiting raised on sample 0 .*SystemExit: 3"):
        score_batch(["t_exit"], ["1"], ["1"])
    with pytest.raises(RewardError, match=r"returned nan for sample 0"):
        score_batch(["t_nan"], ["1"], ["1"])
    with pytest.raises(RewardError, match=r"returned '1.0'"):
        score_batch(["t_str"], ["1"], ["1"])


def test_unknown_data_source():
    with pytest.raises(ValueError, match="No reward function for data_source 'zzz'"):
        score_batch(["zzz"], ["1"], ["1"])
