"""The driver's reward step: rule functions (registry or the user's file) with the failure policy."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from hybridrl.config.schema import Config
from hybridrl.rewards.custom import load_reward_fn
from hybridrl.rewards.processes import RewardProcesses, Sample
from hybridrl.rewards.registry import RewardError, RewardFn, get_reward_fn, score_one

logger = logging.getLogger(__name__)


class RewardScorer:
    """``on_error="raise"`` stops the run with the failing function and sample named;
    ``"fail"`` gives that sample ``failure_score`` and counts it (``reward/failed``): never a silent 0.

    With ``num_workers`` > 0 the functions run in that many child processes under a per-batch deadline
    (``timeout_s``), so a hang or a crash in user code is a reward failure like any other; with 0 they run
    in this process, with no deadline.
    """

    def __init__(
        self,
        custom_fn: RewardFn | None = None,
        on_error: str = "raise",
        failure_score: float = 0.0,
        num_workers: int = 0,
        timeout_s: float = 600.0,
    ) -> None:
        if on_error not in ("raise", "fail"):
            raise ValueError(f"on_error={on_error!r}; use 'raise' or 'fail'.")
        self.custom_fn = custom_fn
        self.on_error = on_error
        self.failure_score = failure_score
        self.processes = RewardProcesses(num_workers, timeout_s) if num_workers > 0 else None
        self._warned = 0

    @classmethod
    def from_config(cls, cfg: Config) -> RewardScorer:
        custom = None
        if cfg.custom_reward_function.path:
            custom = load_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
        r = cfg.reward
        return cls(custom, str(r.on_error), r.failure_score, r.num_workers, r.timeout_s)

    def _outcomes(self, samples: list[Sample]) -> list[float | RewardError]:
        if self.processes is not None:
            return self.processes.score(samples)
        outcomes: list[float | RewardError] = []
        for i, s in enumerate(samples):
            try:
                outcomes.append(score_one(s.fn, i, s.data_source, s.response, s.ground_truth, s.extra_info))
            except RewardError as exc:
                outcomes.append(exc)
        return outcomes

    def score(
        self,
        data_sources: Collection[str],
        responses: Collection[str],
        ground_truths: Collection[Any],
        extra_infos: Collection[Any] | None = None,
    ) -> tuple[list[float], int]:
        """Scores and the number of samples that failed (0 unless on_error="fail")."""
        extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
        rows = list(zip(data_sources, responses, ground_truths, extra_infos))
        outcomes: dict[int, float | RewardError | ValueError] = {}
        samples: dict[int, Sample] = {}
        for i, (source, response, truth, extra) in enumerate(rows):
            try:
                samples[i] = Sample(self.custom_fn or get_reward_fn(source), source, response, truth, extra)
            except ValueError as exc:  # a data_source with no function
                outcomes[i] = exc
        outcomes.update(zip(samples, self._outcomes(list(samples.values()))))
        scores: list[float] = []
        failed = 0
        for i in range(len(rows)):
            outcome = outcomes[i]
            if isinstance(outcome, float):
                scores.append(outcome)
                continue
            if self.on_error == "raise":
                raise outcome
            failed += 1
            scores.append(self.failure_score)
            if self._warned < 5:  # the first few in full; the count is in the metrics
                self._warned += 1
                logger.warning("Reward failure scored as %s: %s", self.failure_score, outcome)
        return scores, failed

    def close(self) -> None:
        """Stop the scoring processes (a later ``score`` starts new ones)."""
        if self.processes is not None:
            self.processes.close()
