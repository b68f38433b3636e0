"""The reward phase on the driver: rule rewards and, when enabled, the reward-model role."""

from __future__ import annotations

import torch

from hybridrl.cluster.role_clients import RewardModelClient
from hybridrl.config.schema import RewardModelConfig
from hybridrl.protocol import Batch
from hybridrl.rewards.scorer import RewardScorer


class RewardStep:
    """score = rule reward (if used) + weight x reward-model score (if enabled), per sequence."""

    def __init__(
        self, cfg: RewardModelConfig, scorer: RewardScorer, reward_model: RewardModelClient | None = None
    ) -> None:
        self.scorer = scorer
        self.reward_model = reward_model  # None when reward_model.enable=false
        self.use_rule = reward_model is None or cfg.use_rule_reward
        self.weight = cfg.weight

    def __call__(self, batch: Batch, metrics: dict[str, float] | None = None) -> torch.Tensor:
        nt = batch.non_tensors
        total = torch.zeros(len(batch), dtype=torch.float32)
        if self.use_rule:
            scores, failed = self.scorer.score(
                nt["data_source"], nt["response_text"], nt["ground_truth"], nt.get("extra_info")
            )
            total += torch.tensor(scores, dtype=torch.float32)
            if metrics is not None:
                metrics["reward/failed"] = metrics.get("reward/failed", 0.0) + failed
        if self.reward_model is not None:
            rm_in = batch.select(
                tensor_keys=["responses"], non_tensor_keys=["prompt_text", "response_text"], meta_keys=[]
            )
            rm_scores = self.reward_model.compute_rm_score(rm_in).tensors["rm_scores"].float()
            total += self.weight * rm_scores
            if metrics is not None:
                metrics["reward_model/score/mean"] = float(rm_scores.mean())
        return total
