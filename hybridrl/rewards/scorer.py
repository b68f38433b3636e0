"""The driver's reward step: rule functions (registry or the user's file) with the failure policy."""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from hybridrl.config.choices import RewardManager
from hybridrl.config.schema import Config
from hybridrl.rewards.custom import load_reward_fn
from hybridrl.rewards.processes import RewardProcesses, Sample
from hybridrl.rewards.registry import RewardError, RewardFn, Scored, get_reward_fn, score_in_one_call, score_sample

logger = logging.getLogger(__name__)


@dataclass
class ScoredBatch:
    scores: list[float]
    failed: int  # samples scored as failed (on_error="fail")
    extras: dict[str, list[float]]  # a dict return's other keys, per sample (NaN where a sample lacks one)


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
        *,
        one_call: bool = False,
    ) -> None:
        """``one_call``: verl's batch reward manager, ``custom_fn`` called once per batch with lists."""
        if on_error not in ("raise", "fail"):
            raise ValueError(f"on_error={on_error!r}; use 'raise' or 'fail'.")
        self.custom_fn = custom_fn
        self.on_error = on_error
        self.failure_score = failure_score
        self.processes = RewardProcesses(num_workers, timeout_s) if num_workers > 0 else None
        self.one_call = one_call
        self._warned = 0

    @classmethod
    def from_config(cls, cfg: Config) -> RewardScorer:
        custom = None
        one_call = cfg.reward_model.reward_manager == RewardManager.batch
        if cfg.custom_reward_function.path:
            custom = load_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name, one_call)
        r = cfg.reward
        return cls(custom, str(r.on_error), r.failure_score, r.num_workers, r.timeout_s, one_call=one_call)

    def _outcomes(self, samples: list[Sample]) -> list[Scored | RewardError]:
        if self.processes is not None:
            return self.processes.score(samples)
        outcomes: list[Scored | RewardError] = []
        for i, s in enumerate(samples):
            try:
                outcomes.append(score_sample(s.fn, i, s.data_source, s.response, s.ground_truth, s.extra_info))
            except RewardError as exc:
                outcomes.append(exc)
        return outcomes

    def _one_call_outcomes(self, columns: tuple[list, list, list, list]) -> list[Scored | RewardError]:
        """The batch manager: every sample's outcome from one call; a failed call fails each sample."""
        assert self.custom_fn is not None  # validation requires custom_reward_function.path
        if self.processes is not None:
            outcome = self.processes.score_in_one_call(self.custom_fn, columns)
        else:
            try:
                outcome = score_in_one_call(self.custom_fn, *columns)
            except RewardError as exc:
                outcome = exc
        if isinstance(outcome, RewardError):
            return [outcome] * len(columns[0])
        return list(outcome)

    def score(
        self,
        data_sources: Collection[str],
        responses: Collection[str],
        ground_truths: Collection[Any],
        extra_infos: Collection[Any] | None = None,
    ) -> ScoredBatch:
        """Each sample's score (``failure_score`` for a failed one with on_error="fail") and extras."""
        extra_infos = extra_infos if extra_infos is not None else [None] * len(responses)
        rows = list(zip(data_sources, responses, ground_truths, extra_infos))
        outcomes: dict[int, Scored | RewardError | ValueError] = {}
        if self.one_call:
            columns = (list(data_sources), list(responses), list(ground_truths), list(extra_infos))
            outcomes.update(enumerate(self._one_call_outcomes(columns)))
        else:
            samples: dict[int, Sample] = {}
            for i, (source, response, truth, extra) in enumerate(rows):
                try:
                    samples[i] = Sample(self.custom_fn or get_reward_fn(source), source, response, truth, extra)
                except ValueError as exc:  # a data_source with no function
                    outcomes[i] = exc
            outcomes.update(zip(samples, self._outcomes(list(samples.values()))))
        result = ScoredBatch([], 0, {})
        for i in range(len(rows)):
            outcome = outcomes[i]
            if isinstance(outcome, tuple):
                score, extras = outcome
                for key, value in extras.items():
                    result.extras.setdefault(key, [math.nan] * len(rows))[i] = value
                result.scores.append(score)
                continue
            if self.on_error == "raise":
                raise outcome
            result.failed += 1
            result.scores.append(self.failure_score)
            if self._warned < 5:  # the first few in full; the count is in the metrics
                self._warned += 1
                logger.warning("Reward failure scored as %s: %s", self.failure_score, outcome)
        return result

    def close(self) -> None:
        """Stop the scoring processes (a later ``score`` starts new ones)."""
        if self.processes is not None:
            self.processes.close()
