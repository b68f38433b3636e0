import pytest

from hybridrl.rewards.gsm8k import SOLUTION_CLIP_CHARS, compute_score, extract_solution
from hybridrl.rewards.registry import score_batch


def test_strict_takes_the_number_after_the_last_marker():
    assert extract_solution("First #### 12 then more work. #### 1,234") == "1234"
    assert extract_solution("so the answer is #### -7") == "-7"
    assert extract_solution("#### 3.5") == "3.5"
    assert extract_solution("#### 42.") == "42"  # sentence period is not part of the number
    assert extract_solution("the answer is 42") is None
    assert extract_solution("####42") is None  # verl's format needs the space
    assert extract_solution("#### .") is None


def test_flexible_takes_the_last_number():
    assert extract_solution("3 apples and 4 pears make 7.", method="flexible") == "7"
    assert extract_solution("total: 1,000 dollars", method="flexible") == "1000"
    assert extract_solution("x = -2 ...", method="flexible") == "-2"
    assert extract_solution("no numbers here.", method="flexible") is None
    with pytest.raises(ValueError, match="strict"):
        extract_solution("1", method="loose")


def test_compute_score_and_format_score():
    assert compute_score("work #### 42", "42") == 1.0
    assert compute_score("work #### 41", "42") == 0.0
    assert compute_score("work #### 41", "42", format_score=0.1) == 0.1
    assert compute_score("work, answer 42", "42", format_score=0.1) == 0.0  # no answer found: 0
    assert compute_score("work, answer 42", "42", method="flexible") == 1.0
    assert compute_score("#### 1,000", "1,000") == 1.0
    assert compute_score("#### 42", "42", score=2.0) == 2.0


def test_only_the_tail_is_scanned():
    padding = "x" * SOLUTION_CLIP_CHARS
    assert compute_score("#### 42 " + padding, "42") == 0.0
    assert compute_score(padding * 10 + " #### 42", "42") == 1.0


def test_registered_for_both_sources_and_method_from_extra_info():
    assert score_batch(["openai/gsm8k", "gsm8k"], ["#### 5", "#### 5"], ["5", "5"]) == [1.0, 1.0]
    assert score_batch(["gsm8k"], ["it is 5"], ["5"]) == [0.0]
    assert score_batch(["gsm8k"], ["it is 5"], ["5"], [{"method": "flexible"}]) == [1.0]
    assert score_batch(["gsm8k"], ["#### 5"], ["5"], [{"index": 3}]) == [1.0]
