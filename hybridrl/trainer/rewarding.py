"""The reward phase on the driver: rule rewards and, when enabled, the reward-model role."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from hybridrl.cluster.role_clients import RewardModelClient
from hybridrl.config.choices import RewardManager
from hybridrl.config.schema import OverlongBufferConfig, RewardModelConfig
from hybridrl.protocol import Batch
from hybridrl.rewards.scorer import RewardScorer


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: OverlongBufferConfig) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0 up to ``max_length - buffer.len`` tokens, then falling linearly
    to ``-penalty_factor`` at ``max_length`` (Yu et al. 2025, as verl's dapo reward manager)."""
    expected = max_length - buffer.len
    exceed = lengths.float() - expected
    return torch.clamp(-exceed / max(buffer.len, 1) * buffer.penalty_factor, max=0.0)


@dataclass
class Rewards:
    """Per sequence: the total score, and the extra values a reward function returned in its dict."""

    scores: torch.Tensor  # (B,)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (B,) each, NaN where a sample had none


def extra_infos(nt: dict[str, Any]) -> Any:
    """Each row's ``extra_info`` as the reward function gets it: with multi-turn rollouts verl adds the
    sample's ``num_turns`` (and hybridrl its ``tool_calls`` and an interaction's ``turn_scores``), so a reward can
    tell a tool's answer from text the model wrote itself."""
    if "num_turns" not in nt:
        return nt.get("extra_info")
    rows = nt.get("extra_info")
    return [
        {**(extra or {}), "num_turns": int(turns), "tool_calls": int(calls), "turn_scores": list(scores)}
        for extra, turns, calls, scores in zip(
            rows if rows is not None else [None] * len(nt["num_turns"]),
            nt["num_turns"],
            nt["tool_calls"],
            nt["turn_scores"],
            strict=True,
        )
    ]


class RewardStep:
    """score = rule reward (if used) + weight x reward-model score (if enabled), per sequence."""

    def __init__(
        self,
        cfg: RewardModelConfig,
        scorer: RewardScorer,
        reward_model: RewardModelClient | None = None,
        *,
        reward_fn_key: str = "data_source",
        max_response_length: int = 0,
    ) -> None:
        """``reward_fn_key``: the column that picks each sample's function (verl's ``data.reward_fn_key``);
        ``max_response_length``: the length budget dapo's overlong penalty counts back from."""
        self.scorer = scorer
        self.reward_model = reward_model  # None when reward_model.enable=false
        self.use_rule = reward_model is None or cfg.use_rule_reward
        self.weight = cfg.weight
        self.reward_fn_key = reward_fn_key
        buffer = cfg.overlong_buffer
        self.overlong = buffer if cfg.reward_manager == RewardManager.dapo and buffer.enable else None
        self.max_response_length = max_response_length

    def __call__(self, batch: Batch, metrics: dict[str, float] | None = None) -> Rewards:
        """Scores ``batch``; with ``metrics``, adds the failure count, the extras' means and the reward
        model's mean score to them."""
        nt = batch.non_tensors
        out = Rewards(torch.zeros(len(batch), dtype=torch.float32))
        if self.use_rule:
            scored = self.scorer.score(nt[self.reward_fn_key], nt["response_text"], nt["ground_truth"], extra_infos(nt))
            out.scores += torch.tensor(scored.scores, dtype=torch.float32)
            if self.overlong is not None:
                penalty = overlong_penalty(
                    batch.tensors["response_mask"].sum(-1), self.max_response_length, self.overlong
                )
                out.scores += penalty
                if metrics is not None and self.overlong.log:
                    metrics["reward/overlong_penalty/mean"] = float(penalty.mean())
                    metrics["reward/overlong/mean"] = float((penalty < 0).float().mean())
            out.extras = {k: torch.tensor(v, dtype=torch.float32) for k, v in scored.extras.items()}
            if metrics is not None:
                metrics["reward/failed"] = metrics.get("reward/failed", 0.0) + scored.failed
                for key, values in out.extras.items():
                    metrics[f"reward/{key}/mean"] = float(values.nanmean())
        if self.reward_model is not None:
            rm_in = batch.select(
                tensor_keys=["responses"], non_tensor_keys=["prompt_text", "response_text"], meta_keys=[]
            )
            rm_scores = self.reward_model.compute_rm_score(rm_in).tensors["rm_scores"].float()
            out.scores += self.weight * rm_scores
            if metrics is not None:
                metrics["reward_model/score/mean"] = float(rm_scores.mean())
        return out
