"""MATH (Hendrycks et al.) scoring: the last ``\\boxed{...}`` answer against the reference answer.

Written from the behaviour the MATH reference evaluation describes: take the last boxed expression of
the response, normalise it and the ground truth (``strip_string``), and compare. On top of the
reference's string comparison, ``is_equiv`` also accepts two answers that are the same number
(``0.25`` vs ``\\frac{1}{4}``, ``1,000`` vs ``1000``).

Registered for ``data_source`` ``"lighteval/MATH"``, ``"DigitalLearningGmbH/MATH-lighteval"``,
``"HuggingFaceH4/MATH-500"`` and ``"math"``. The ground truth may be the plain answer (what
``examples/data_preprocess/math_dataset.py`` stores) or a string containing ``\\boxed{...}`` (a full
reference solution); a response without a boxed answer scores 0.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from hybridrl.rewards.registry import register_reward

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def last_boxed_only_string(string: str) -> str | None:
    """The last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed ...`` of ``string``, command included.

    Braces are matched, so ``\\boxed{\\frac{1}{2}}`` comes back whole. The space form ``\\boxed 5``
    runs to the next ``$`` or the end of the line. Returns None when there is no such command or its
    braces never close (a response cut off by the length limit).
    """
    start, command = max((string.rfind(c), c) for c in _BOX_COMMANDS)
    if start < 0:
        return None
    i = start + len(command)
    if string.startswith("{", i):
        depth = 0
        for j in range(i, len(string)):
            if string[j] == "{":
                depth += 1
            elif string[j] == "}":
                depth -= 1
                if depth == 0:
                    return string[start : j + 1]
        return None
    if string.startswith(" ", i):
        rest = re.split(r"[$\n]", string[i + 1 :], maxsplit=1)[0].strip()
        return f"{command} {rest}" if rest else None
    return None


def remove_boxed(s: str) -> str:
    """``\\boxed{x}`` / ``\\fbox{x}`` / ``\\boxed x`` -> ``x``."""
    for command in _BOX_COMMANDS:
        if s.startswith(command + " "):
            return s[len(command) + 1 :]
        if s.startswith(command + "{") and s.endswith("}"):
            return s[len(command) + 1 : -1]
    raise ValueError(f"{s!r} is not a \\boxed{{...}} or \\fbox{{...}} expression.")


def _fix_fracs(string: str) -> str:
    """Add braces to ``\\frac`` arguments written without them: ``\\frac12`` -> ``\\frac{1}{2}``,
    ``\\frac1{72}`` -> ``\\frac{1}{72}``, ``\\frac{3}4`` -> ``\\frac{3}{4}``."""
    parts = string.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if not part or part[0] == "{":
            # first argument braced: the second may still be a bare character
            if part:
                depth, end = 0, None
                for j, ch in enumerate(part):
                    depth += ch == "{"
                    depth -= ch == "}"
                    if depth == 0:
                        end = j
                        break
                if end is not None and end + 1 < len(part) and part[end + 1] not in "{\\":
                    part = part[: end + 1] + "{" + part[end + 1] + "}" + part[end + 2 :]
            out += part
            continue
        if len(part) < 2 or part[0] == "\\":  # "\frac1" / "\frac\pi2": keep as written
            out += part
            continue
        a, b = part[0], part[1]
        if b == "{":
            out += "{" + a + "}" + part[1:]
        else:
            out += "{" + a + "}{" + b + "}" + part[2:]
    return out


def _fix_sqrt(string: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}`` (a bare one-character argument gets braces)."""
    return re.sub(r"\\sqrt([^{\[\\\s])", r"\\sqrt{\1}", string)


def _fix_a_slash_b(string: str) -> str:
    """``3/4`` -> ``\\frac{3}{4}`` when the whole answer is integer/integer."""
    m = re.fullmatch(r"(-?\d+)/(\d+)", string)
    if not m:
        return string
    return f"\\frac{{{m.group(1)}}}{{{m.group(2)}}}"


def _remove_right_units(string: str) -> str:
    """``5 \\text{ cm}`` -> ``5 ``: units are written as ``\\text{ ...}`` (with a space) in MATH."""
    for marker in ("\\text{ ", "\\mbox{ "):
        if marker in string:
            string = string.split(marker)[0]
    return string


def strip_string(string: str) -> str:
    """Normalise a MATH answer so that equal answers written differently compare equal."""
    string = str(string).replace("\n", "")
    string = string.replace("\\!", "")  # negative thin space
    string = string.replace("\\\\", "\\")  # doubled backslashes
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")  # degrees
    string = string.replace("\\$", "").replace("$", "")  # dollars / stray math delimiters
    string = _remove_right_units(string)
    string = string.replace("\\%", "").replace("%", "")
    string = string.strip()
    if string.endswith("."):  # trailing sentence period: "5." -> "5"
        string = string[:-1].rstrip()
    # leading zeros: " .5" -> " 0.5", "{.5" -> "{0.5", ".5" -> "0.5"
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if not string:
        return string
    if string[0] == ".":
        string = "0" + string
    # "x = 3" / "k=3" -> "3": a short left-hand side is a variable name, not part of the answer
    sides = string.split("=")
    if len(sides) == 2 and len(sides[0].strip()) <= 2:
        string = sides[1]
    string = string.replace(" ", "")
    string = _fix_sqrt(string)  # after removing spaces, so "\sqrt 3" is fixed too
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    string = _fix_a_slash_b(string)
    return string


_DECIMAL = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")
_FRAC = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}")


def _as_number(string: str) -> Fraction | None:
    """The exact value of a normalised answer that is a plain number or an integer fraction."""
    if len(string) > 100:
        return None
    if _DECIMAL.fullmatch(string):
        return Fraction(string.replace(",", ""))
    m = _FRAC.fullmatch(string)
    if m and int(m.group(3)) != 0:
        value = Fraction(int(m.group(2)), int(m.group(3)))
        return -value if m.group(1) else value
    return None


def is_equiv(a: str | None, b: str | None) -> bool:
    """True when two answers are the same after ``strip_string``, or are the same number.

    A missing answer (None) is never equivalent to anything: it must score 0.
    """
    if a is None or b is None:
        return False
    try:
        sa, sb = strip_string(a), strip_string(b)
    except Exception:  # normalisation must never make scoring fail: fall back to the raw strings
        return a == b
    if sa == sb:
        return True
    na, nb = _as_number(sa), _as_number(sb)
    return na is not None and na == nb


def _answer_of(text: str) -> str | None:
    boxed = last_boxed_only_string(text)
    return remove_boxed(boxed) if boxed is not None else None


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the response's last boxed answer is equivalent to the ground truth, else 0.0."""
    answer = _answer_of(solution_str)
    if answer is None:
        return 0.0
    text = str(ground_truth)
    truth = _answer_of(text) if any(c in text for c in _BOX_COMMANDS) else text
    return 1.0 if is_equiv(answer, truth) else 0.0


def math_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """verl-signature entry point for the MATH data sources."""
    return compute_score(solution_str, ground_truth)


for _source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"):
    register_reward(_source)(math_reward)
