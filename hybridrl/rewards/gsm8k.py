"""GSM8K scoring, compatible with verl's ``verl.utils.reward_score.gsm8k``.

GSM8K reference solutions end with ``#### <number>``; the preprocess script
(``examples/data_preprocess/gsm8k.py``) asks the model to answer the same way and stores the number
(commas removed) as the ground truth.

* ``strict``: the answer is the number after the *last* ``"#### "`` in the response.
* ``flexible``: the answer is the last number anywhere in the response.

``compute_score`` gives ``score`` for a correct answer, ``format_score`` for an answer that was found
but is wrong, and 0.0 when no answer could be extracted (verl's rule).

Registered for ``data_source`` ``"openai/gsm8k"`` and ``"gsm8k"`` (strict); a row whose
``extra_info`` has ``{"method": "flexible"}`` is scored with the flexible method.

Two small differences from verl, both only ever turn a verl 0 into a 1 for a right answer: a
sentence-ending period after the number (``"#### 42."``) is not part of the answer, and commas are
removed from the ground truth as well as from the answer.
"""

from __future__ import annotations

import re
from typing import Any

from hybridrl.rewards.registry import register_reward

# Only the tail of a response is scanned, as in verl (same constant), for two reasons: the answer the
# prompt asks for comes at the end, and a regex over every number of a long (possibly degenerate,
# thousands of tokens) response costs time on every sample of every step for nothing. Keeping verl's
# window also keeps scores identical to verl's on the same responses. Consequence: a "#### " marker
# that is further than 300 characters from the end is not seen, which is intended.
SOLUTION_CLIP_CHARS = 300

_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_NUMBER = re.compile(r"-?[0-9.,]+")
METHODS = ("strict", "flexible")


def _clean(number: str) -> str:
    number = number.replace(",", "").replace("$", "")
    return number.rstrip(".")  # "#### 42." -> "42" (the period ends the sentence)


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer in ``solution_str`` (commas removed), or None when there is none."""
    if method not in METHODS:
        raise ValueError(f"Unknown GSM8K extraction method {method!r}; use one of {METHODS}.")
    tail = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        if not found:
            return None
        answer = _clean(found[-1])
        return answer if answer not in ("", "-") else None
    for candidate in reversed(_NUMBER.findall(tail)):
        answer = _clean(candidate)
        if answer not in ("", "-"):
            return answer
    return None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` if the extracted answer equals ``ground_truth``, ``format_score`` if it differs, else 0."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    if answer == _clean(str(ground_truth).strip()):
        return float(score)
    return float(format_score)


@register_reward("openai/gsm8k")
def gsm8k_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """verl-signature entry point: strict unless ``extra_info["method"] == "flexible"``."""
    method = "strict"
    if isinstance(extra_info, dict) and extra_info.get("method") is not None:
        method = extra_info["method"]
    return compute_score(solution_str, ground_truth, method=method)


register_reward("gsm8k")(gsm8k_reward)
