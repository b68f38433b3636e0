"""Rule-based reward functions, keyed by the row's ``data_source`` as in verl.

Every function has verl's signature ``fn(data_source, solution_str, ground_truth, extra_info) -> float``
so a user's verl reward function ports unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

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
        raise ValueError(
            f"No reward function for data_source '{data_source}'; registered: {sorted(REWARD_FNS)}."
        )
    return REWARD_FNS[data_source]


def score_batch(
    data_sources: Sequence[str],
    responses: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
) -> list[float]:
    """Score each response; a failure names the function and the sample instead of scoring 0."""
    extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
    scores = []
    for i, (source, response, truth, extra) in enumerate(
        zip(data_sources, responses, ground_truths, extra_infos)
    ):
        fn = get_reward_fn(source)
        name = getattr(fn, "__qualname__", repr(fn))
        try:
            value = fn(source, response, truth, extra)
        except Exception as exc:
            raise RewardError(
                f"Reward function {name} raised on sample {i} (data_source={source!r}, "
                f"response={response!r}): {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RewardError(
                f"Reward function {name} returned {value!r} for sample {i} "
                f"(data_source={source!r}); it must return a finite float."
            )
        scores.append(float(value))
    return scores


def _positional_match(solution_str: str, ground_truth: str) -> float:
    answer = solution_str.strip()
    hits = sum(1 for i, ch in enumerate(ground_truth) if i < len(answer) and answer[i] == ch)
    return hits / len(ground_truth)


@register_reward("copy")
def copy_reward(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None) -> float:
    """Fraction of ground-truth positions the response gets right (partial credit)."""
    return _positional_match(solution_str, ground_truth)


register_reward("reverse")(copy_reward)
