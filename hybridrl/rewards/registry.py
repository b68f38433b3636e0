"""Rule-based reward functions, keyed by the row's ``data_source`` as in verl.

Every function has verl's signature ``fn(data_source, solution_str, ground_truth, extra_info) -> float``
so a user's verl reward function ports unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

RewardFn = Callable[[str, str, Any, Any], float]
REWARD_FNS: dict[str, RewardFn] = {}


class RewardError(RuntimeError):
    """A reward function failed or returned something that is not a finite number."""


def register_reward(name: str) -> Callable[[RewardFn], RewardFn]:
    def wrap(fn: RewardFn) -> RewardFn:
        REWARD_FNS[name] = fn
        return fn

    return wrap


def get_reward_fn(data_source: str) -> RewardFn:
    if data_source not in REWARD_FNS:
        raise ValueError(f"No reward function for data_source '{data_source}'; registered: {sorted(REWARD_FNS)}.")
    return REWARD_FNS[data_source]


def function_name(fn: RewardFn) -> str:
    """How errors name a reward function (a custom one says its file)."""
    return str(getattr(fn, "__qualname__", repr(fn)))


Scored = tuple[float, dict[str, float]]  # the score, and the numeric extra keys of a dict return (verl's)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def score_sample(
    fn: RewardFn, index: int, data_source: str, response: str, ground_truth: Any, extra_info: Any = None
) -> Scored:
    """One sample's score and extras; a failure names the function and the sample instead of scoring 0.

    As in verl, a function may return ``{"score": s, "acc": ..., ...}``: the other numeric (or boolean)
    values become per-sample metrics; non-numeric ones are dropped."""
    name = function_name(fn)
    try:
        value = fn(data_source, response, ground_truth, extra_info)
    except (Exception, SystemExit) as exc:  # sys.exit() in user code ended the run without a word
        raise RewardError(
            f"Reward function {name} raised on sample {index} (data_source={data_source!r}, "
            f"response={response!r}): {type(exc).__name__}: {exc}"
        ) from exc
    return _scored(value, name, index, data_source)


def _scored(value: Any, name: str, index: int, data_source: str) -> Scored:
    extras: dict[str, float] = {}
    if isinstance(value, dict) and "score" in value:
        extras = {str(k): float(v) for k, v in value.items() if k != "score" and (_number(v) or isinstance(v, bool))}
        value = value["score"]
    if not _number(value):
        raise RewardError(
            f"Reward function {name} returned {value!r} for sample {index} "
            f"(data_source={data_source!r}); it must return a finite float (or a dict with a 'score' key)."
        )
    return float(value), extras


def score_in_one_call(
    fn: Callable[..., Any],
    data_sources: Sequence[str],
    responses: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
) -> list[Scored]:
    """verl's batch reward manager: ``fn(data_sources, solution_strs, ground_truths, extra_infos)`` once for the
    whole batch (a function that batches a model or a service call), one score or dict per sample back."""
    name = function_name(fn)
    n = len(responses)
    try:
        values = fn(list(data_sources), list(responses), list(ground_truths), list(extra_infos))
    except (Exception, SystemExit) as exc:
        raise RewardError(
            f"Batch reward function {name} raised on a batch of {n} samples: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(values, (list, tuple)) or len(values) != n:
        got = f"{type(values).__name__} of {len(values)}" if isinstance(values, (list, tuple)) else repr(values)[:80]
        raise RewardError(
            f"Batch reward function {name} returned {got} for a batch of {n} samples; it must return a list with "
            f"one score (or dict with a 'score' key) per sample, in order."
        )
    return [_scored(value, name, i, source) for i, (value, source) in enumerate(zip(values, data_sources))]


def score_one(
    fn: RewardFn, index: int, data_source: str, response: str, ground_truth: Any, extra_info: Any = None
) -> float:
    """One sample's score (``score_sample`` without the extras)."""
    return score_sample(fn, index, data_source, response, ground_truth, extra_info)[0]


def score_batch(
    data_sources: Sequence[str],
    responses: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    reward_fn: RewardFn | None = None,
) -> list[float]:
    """Score each response with ``reward_fn`` or the function registered for its data_source."""
    extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
    return [
        score_one(reward_fn or get_reward_fn(source), i, source, response, truth, extra)
        for i, (source, response, truth, extra) in enumerate(zip(data_sources, responses, ground_truths, extra_infos))
    ]


def _positional_match(solution_str: str, ground_truth: str) -> float:
    answer = solution_str.strip()
    hits = sum(1 for i, ch in enumerate(ground_truth) if i < len(answer) and answer[i] == ch)
    return hits / len(ground_truth)


@register_reward("copy")
def copy_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """Fraction of ground-truth positions the response gets right (partial credit)."""
    return _positional_match(solution_str, ground_truth)


register_reward("reverse")(copy_reward)


#: Where a tool's answer ends in a multi-turn response (the tiny tokenizer's and Qwen's hermes format).
TOOL_RESPONSE_END = "</tool_response>"

#: The lookup task's bonus for a response in which the tool answered: a format reward, as agentic RL recipes
#: give for a well-formed call, so that calling is found before copying its answer pays.
TOOL_USE_BONUS = 0.1


@register_reward("lookup")
def lookup_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """The copy reward of what the model wrote after the tool's first answer (the whole response where no
    tool answered), plus ``TOOL_USE_BONUS`` where one did: at most 1. Whether a tool answered comes from the
    rollout (``extra_info["num_turns"]``: 3 or more once a tool turn joined the conversation), never from
    the text, which the model can write ``</tool_response>`` into itself."""
    answered = int((extra_info or {}).get("num_turns", 0)) >= 3
    answer = (
        solution_str.split(TOOL_RESPONSE_END, 1)[1] if answered and TOOL_RESPONSE_END in solution_str else solution_str
    )
    return TOOL_USE_BONUS * answered + (1 - TOOL_USE_BONUS) * _positional_match(answer, ground_truth)
