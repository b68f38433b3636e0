"""The driver's reward step: rule functions (registry or the user's file) with the failure policy."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from hybridrl.config.schema import Config
from hybridrl.rewards.custom import load_reward_fn
from hybridrl.rewards.registry import RewardError, RewardFn, get_reward_fn, score_one

logger = logging.getLogger(__name__)


class RewardScorer:
    """``on_error="raise"`` stops the run with the failing function and sample named;
    ``"fail"`` gives that sample ``failure_score`` and counts it (``reward/failed``): never a silent 0."""

    def __init__(self, custom_fn: RewardFn | None = None, on_error: str = "raise", failure_score: float = 0.0) -> None:
        if on_error not in ("raise", "fail"):
            raise ValueError(f"on_error={on_error!r}; use 'raise' or 'fail'.")
        self.custom_fn = custom_fn
        self.on_error = on_error
        self.failure_score = failure_score
        self._warned = 0

    @classmethod
    def from_config(cls, cfg: Config) -> RewardScorer:
        custom = None
        if cfg.custom_reward_function.path:
            custom = load_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
        return cls(custom, str(cfg.reward.on_error), cfg.reward.failure_score)

    def score(
        self,
        data_sources: Collection[str],
        responses: Collection[str],
        ground_truths: Collection[Any],
        extra_infos: Collection[Any] | None = None,
    ) -> tuple[list[float], int]:
        """Scores and the number of samples that failed (0 unless on_error="fail")."""
        extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
        scores, failed = [], 0
        for i, (source, response, truth, extra) in enumerate(zip(data_sources, responses, ground_truths, extra_infos)):
            try:
                fn = self.custom_fn or get_reward_fn(source)
                scores.append(score_one(fn, i, source, response, truth, extra))
            except (RewardError, ValueError) as exc:
                if self.on_error == "raise":
                    raise
                failed += 1
                scores.append(self.failure_score)
                if self._warned < 5:  # the first few in full; the count is in the metrics
                    self._warned += 1
                    logger.warning("Reward failure scored as %s: %s", self.failure_score, exc)
        return scores, failed
