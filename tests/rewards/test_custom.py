import pickle
import textwrap

import pytest

from hybridrl.rewards.custom import CustomRewardError, check_reward_file, load_reward_fn
from hybridrl.rewards.registry import REWARD_FNS, RewardError, register_reward, score_batch, score_sample


def write(tmp_path, body, name="my_reward.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_loads_verl_style_function(tmp_path):
    path = write(
        tmp_path,
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            bonus = (extra_info or {}).get("bonus", 0.0)
            return float(solution_str.strip() == ground_truth) + bonus
    """,
    )
    fn = load_reward_fn(path)
    assert fn("src", " 42 ", "42", None) == 1.0
    assert fn("src", "41", "42", {"bonus": 0.5}) == 0.5
    assert fn(data_source="src", solution_str="42", ground_truth="42", extra_info=None) == 1.0


def test_other_name_positional_only_kwargs_and_dict_result(tmp_path):
    path = write(
        tmp_path,
        """
        def positional(a, b, c, d, /):
            return 1.0 if (a, b, c, d) == ("s", "r", "g", None) else 0.0

        def with_kwargs(data_source, solution_str, ground_truth, extra_info, scale=2.0, **kwargs):
            return {"score": scale, "acc": True}
    """,
    )
    assert load_reward_fn(path, name="positional")("s", "r", "g", None) == 1.0
    fn = load_reward_fn(path, name="with_kwargs")
    assert fn("s", "r", "g", None) == {"score": 2.0, "acc": True}  # verl's dict, kept whole
    assert score_sample(fn, 0, "s", "r", "g") == (2.0, {"acc": 1.0})  # extra numbers become metrics


def test_keyword_call_when_names_match(tmp_path):
    # verl calls by keyword: a function with the four names in another order still works
    path = write(
        tmp_path,
        """
        def compute_score(ground_truth, solution_str, data_source, extra_info):
            return float(solution_str == ground_truth and data_source == "src")
    """,
    )
    assert load_reward_fn(path)("src", "7", "7", None) == 1.0


def test_plugs_into_score_batch_and_pickles(tmp_path):
    path = write(
        tmp_path,
        """
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            return 1 / 0 if solution_str == "boom" else 1.0
    """,
    )
    fn = load_reward_fn(path)
    register_reward("t_custom")(fn)
    try:
        assert score_batch(["t_custom"], ["ok"], ["x"]) == [1.0]
        with pytest.raises(RewardError, match=r"compute_score \(from .*my_reward.py\) raised on sample 0"):
            score_batch(["t_custom"], ["boom"], ["x"])
    finally:
        REWARD_FNS.pop("t_custom")
    clone = pickle.loads(pickle.dumps(fn))
    assert clone("s", "ok", "x", None) == 1.0 and clone.path == fn.path


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.py")
    with pytest.raises(CustomRewardError, match=r"nope\.py' does not exist"):
        load_reward_fn(path)
    with pytest.raises(CustomRewardError, match="is not a file"):
        load_reward_fn(str(tmp_path))


def test_import_error_shows_the_original_exception(tmp_path):
    path = write(
        tmp_path,
        """
        import no_such_module_for_hybridrl_tests
    """,
    )
    with pytest.raises(
        CustomRewardError,
        match=r"my_reward\.py' failed: ModuleNotFoundError: "
        r"No module named 'no_such_module_for_hybridrl_tests'",
    ) as err:
        load_reward_fn(path)
    assert isinstance(err.value.__cause__, ModuleNotFoundError)
    bad = write(tmp_path, "def compute_score(:\n", name="syntax.py")
    with pytest.raises(CustomRewardError, match=r"syntax\.py' failed: SyntaxError: .*line 1"):
        load_reward_fn(bad)
    raising = write(tmp_path, "raise RuntimeError('config missing')\n", name="raising.py")
    with pytest.raises(CustomRewardError, match="RuntimeError: config missing"):
        load_reward_fn(raising)


def test_missing_name_lists_callables(tmp_path):
    path = write(
        tmp_path,
        """
        import os
        THRESHOLD = 0.5
        def score_fn(data_source, solution_str, ground_truth, extra_info):
            return 0.0
        def _private():
            pass
    """,
    )
    with pytest.raises(CustomRewardError, match=r"has no attribute 'compute_score'; callables found: \['score_fn'\]"):
        load_reward_fn(path)


def test_not_callable(tmp_path):
    path = write(tmp_path, "compute_score = 3\n")
    with pytest.raises(
        CustomRewardError, match=r"'compute_score' in .*my_reward\.py' is a value of type int, not a function"
    ):
        load_reward_fn(path)


@pytest.mark.parametrize(
    "signature",
    [
        "def compute_score(solution_str, ground_truth):",
        "def compute_score(data_source, solution_str, ground_truth, extra_info, required_flag):",
        "def compute_score(*, data_source, solution_str, ground_truth):",
    ],
)
def test_wrong_signature(tmp_path, signature):
    path = write(tmp_path, signature + "\n    return 0.0\n")
    with pytest.raises(
        CustomRewardError,
        match=r"has the signature compute_score\(.*\).*must accept \(data_source, solution_str, "
        r"ground_truth, extra_info\)",
    ):
        load_reward_fn(path)


def test_the_static_check_runs_none_of_the_file(tmp_path):
    marker = tmp_path / "ran"
    path = write(
        tmp_path,
        f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("ran")
        LIMIT: int = 3

        def compute_score(data_source, solution_str: str, ground_truth, extra_info=pathlib.Path("x")):
            return 1.0
    """,
    )
    check_reward_file(path)
    assert not marker.exists()


@pytest.mark.parametrize(
    "body,name,message",
    [
        ("def compute_score(:\n", "compute_score", r"is not valid Python: .* at line 1; fix that line"),
        (
            "def score_fn(a, b, c, d):\n    return 0.0\n",
            "compute_score",
            r"defines no 'compute_score'; functions found: \['score_fn'\]",
        ),
        (
            "def compute_score(solution_str, ground_truth):\n    pass\n",
            "compute_score",
            r"has the signature compute_score\(solution_str, ground_truth\)",
        ),
        (
            "def compute_score(*, data_source, solution_str, ground_truth):\n    pass\n",
            "compute_score",
            r"cannot be called with verl's four arguments",
        ),
    ],
)
def test_the_static_check_names_the_fix(tmp_path, body, name, message):
    with pytest.raises(CustomRewardError, match=message) as info:
        check_reward_file(write(tmp_path, body), name)
    assert "\n" not in str(info.value)


def test_the_static_check_accepts_what_it_cannot_see(tmp_path):
    check_reward_file(write(tmp_path, "from math import *\n"), "compute_score")  # a star import may bring it
    check_reward_file(write(tmp_path, "from math import isclose as compute_score\n"))
    check_reward_file(write(tmp_path, "import functools\n@functools.cache\ndef compute_score(x):\n    pass\n"))
    with pytest.raises(CustomRewardError, match="does not exist"):
        check_reward_file(str(tmp_path / "nope.py"))
