import pytest

from hybridrl.rewards.math_verify import compute_score, is_equiv, last_boxed_only_string, remove_boxed, strip_string
from hybridrl.rewards.registry import score_batch


@pytest.mark.parametrize(
    "text, boxed",
    [
        ("so \\boxed{5}.", "\\boxed{5}"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\boxed{\\frac{1}{\\sqrt{2}}}"),
        ("nested \\boxed{\\{a, \\{b\\}\\}} and {braces} after", "\\boxed{\\{a, \\{b\\}\\}}"),
        ("$\\boxed{x^{2}}$", "\\boxed{x^{2}}"),
        ("answer: $\\boxed 7$", "\\boxed 7"),
        ("line \\boxed 12\nnext line", "\\boxed 12"),
        ("\\boxed{1} and finally \\fbox{2}", "\\fbox{2}"),
        ("no box here", None),
        ("cut off \\boxed{\\frac{1}{2", None),
        ("\\boxed", None),
    ],
)
def test_last_boxed_only_string(text, boxed):
    assert last_boxed_only_string(text) == boxed


def test_remove_boxed():
    assert remove_boxed("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert remove_boxed("\\fbox{3}") == "3"
    assert remove_boxed("\\boxed 7") == "7"
    with pytest.raises(ValueError, match="not a"):
        remove_boxed("7")


@pytest.mark.parametrize(
    "a, b",
    [
        ("\\frac12", "\\frac{1}{2}"),
        ("\\frac1{72}", "\\frac{1}{72}"),
        ("\\frac{3}4", "\\frac{3}{4}"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac{2}{3}", "\\frac{2}{3}"),
        ("0.5", "\\frac{1}{2}"),
        ("0.5", "\\frac12"),
        (".5", "0.5"),
        ("0.25", "\\frac{1}{4}"),  # numeric equality
        ("1/4", "\\frac{1}{4}"),
        ("-3/4", "-\\frac{3}{4}"),
        ("10 \\text{ cm}", "10"),
        ("5\\text{ inches}", "5"),
        ("\\$ 5", "5"),
        ("90^\\circ", "90"),
        ("90^{\\circ}", "90"),
        ("50\\%", "50"),
        ("( 1 , 2 )", "(1,2)"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("x=3", "3"),
        ("x = 3", "3"),
        ("k = -1", "-1"),
        ("5.", "5"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("2\\sqrt 2", "2\\sqrt{2}"),
        ("1,000", "1000"),
        ("12", "12.0"),
        ("\\!10", "10"),
    ],
)
def test_equivalent(a, b):
    assert is_equiv(a, b) and is_equiv(b, a)


@pytest.mark.parametrize(
    "a, b",
    [
        ("2", "3"),
        ("\\frac{1}{2}", "\\frac{1}{3}"),
        ("0.5", "0.51"),
        ("\\sqrt{2}", "\\sqrt{3}"),
        ("(1,2)", "(2,1)"),
        ("x^2", "x^3"),
        ("y = 2x + 1", "2x + 1 = y"),
        ("\\frac{1}{0}", "0"),
        ("1,2", "12"),
    ],
)
def test_not_equivalent(a, b):
    assert not is_equiv(a, b)


def test_none_is_never_equivalent():
    assert not is_equiv(None, None) and not is_equiv("1", None)


def test_strip_string_examples():
    assert strip_string(" \\dfrac{1}{2} ") == "\\frac{1}{2}"
    assert strip_string("x = 3") == "3"
    assert strip_string("3/4") == "\\frac{3}{4}"
    assert strip_string("") == ""


def test_compute_score_with_plain_and_boxed_ground_truth():
    response = "We get $x = \\frac{1}{2}$, so the answer is $\\boxed{\\dfrac12}$."
    assert compute_score(response, "\\frac{1}{2}") == 1.0
    assert compute_score(response, "The answer is $\\boxed{0.5}$.") == 1.0
    assert compute_score(response, "\\frac{1}{3}") == 0.0
    assert compute_score("the answer is 1/2", "\\frac{1}{2}") == 0.0  # no boxed answer
    assert compute_score("\\boxed{1}", "\\boxed{1") == 0.0  # broken reference: never a match


def test_registered_sources():
    sources = ["lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"]
    assert score_batch(sources, ["\\boxed{4}"] * 4, ["4"] * 4) == [1.0] * 4
    assert score_batch(sources, ["\\boxed{5}"] * 4, ["4"] * 4) == [0.0] * 4
