"""The reward phase on the driver: rule rewards and, when enabled, the reward-model role."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hybridrl.cluster.role_clients import RewardModelClient
from hybridrl.config.schema import RewardModelConfig
from hybridrl.protocol import Batch
from hybridrl.rewards.scorer import RewardScorer


@dataclass
class Rewards:
    """Per sequence: the total score, and the extra values a reward function returned in its dict."""

    scores: torch.Tensor  # (B,)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # (B,) each, NaN where a sample had none


class RewardStep:
    """score = rule reward (if used) + weight x reward-model score (if enabled), per sequence."""

    def __init__(
        self, cfg: RewardModelConfig, scorer: RewardScorer, reward_model: RewardModelClient | None = None
    ) -> None:
        self.scorer = scorer
        self.reward_model = reward_model  # None when reward_model.enable=false
        self.use_rule = reward_model is None or cfg.use_rule_reward
        self.weight = cfg.weight

    def __call__(self, batch: Batch, metrics: dict[str, float] | None = None) -> Rewards:
        """Scores ``batch``; with ``metrics``, adds the failure count, the extras' means and the reward
        model's mean score to them."""
        nt = batch.non_tensors
        out = Rewards(torch.zeros(len(batch), dtype=torch.float32))
        if self.use_rule:
            scored = self.scorer.score(nt["data_source"], nt["response_text"], nt["ground_truth"], nt.get("extra_info"))
            out.scores += torch.tensor(scored.scores, dtype=torch.float32)
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
