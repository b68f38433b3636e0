"""The PPO loop on the driver: explicit data flow between role groups, one step at a time."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.algorithms.kl_control import apply_kl_penalty, make_kl_controller
from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.data.dataset import EpochSampler, PromptDataset, group_index
from hybridrl.protocol import Batch
from hybridrl.rewards.registry import score_batch
from hybridrl.trainer.metrics import data_metrics, throughput_metrics, timed
from hybridrl.tracking import Tracker

logger = logging.getLogger(__name__)

GEN_KEYS = ["input_ids", "attention_mask", "position_ids"]
FORWARD_KEYS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]


@dataclass
class RoleHandle:
    """One role on its worker group: what the driver calls."""

    group: WorkerGroup
    role: str

    def dp(self, method: str, batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
        return self.group.call_dp(self.role, method, batch)

    def split(self, method: str, batch: Batch) -> list[Any]:
        return self.group.call_split(self.role, method, batch)

    def all(self, method: str, *args: Any) -> list[Any]:
        return self.group.call_all(self.role, method, *args)


def _mean_over_ranks(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def _max_over_ranks(metas: list[dict[str, Any]]) -> dict[str, float]:
    """Per-rank timings: a step waits for the slowest rank."""
    keys = {k for m in metas for k in m if k.startswith("timing_s/")}
    return {k: max(m.get(k, 0.0) for m in metas) for k in keys}


class PPOTrainer:
    def __init__(self, cfg: Any, roles: dict[str, RoleHandle], dataset: PromptDataset, tracker: Tracker) -> None:
        self.cfg = cfg
        self.roles = roles
        self.dataset = dataset
        self.tracker = tracker
        self.sampler = EpochSampler(len(dataset), cfg.data.train_batch_size, cfg.data.shuffle, cfg.data.seed)
        algo = cfg.algorithm
        self.estimator = get_adv_estimator(algo.adv_estimator)
        self.kl_ctrl = make_kl_controller(algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl,
                                          algo.kl_ctrl.horizon)
        self.num_workers = sum({id(h.group): h.group.world_size for h in roles.values()}.values())
        self.history: list[dict[str, float]] = []

    def step(self, step: int) -> dict[str, float]:
        cfg = self.cfg
        timings: dict[str, float] = {}
        metrics: dict[str, float] = {}
        actor, ref, critic = self.roles["actor_rollout"], self.roles["ref"], self.roles["critic"]
        with timed("step", timings):
            batch = self.dataset.collate(self.sampler.next_indices())
            batch = batch.repeat(cfg.actor_rollout_ref.rollout.n, interleave=True)
            seed = cfg.trainer.seed * 1_000_003 + step
            batch.meta["seed"] = seed

            with timed("gen", timings):
                gen_in = batch.pop(tensor_keys=GEN_KEYS)
                gen_in.meta = {"seed": seed}
                gen_out, metas = actor.dp("generate", gen_in)
                batch.union(gen_out)
                metrics.update(_max_over_ranks(metas))

            with timed("reward", timings):
                scores = score_batch(batch.non_tensors["data_source"], batch.non_tensors["response_text"],
                                     batch.non_tensors["ground_truth"])
                batch.tensors["token_level_scores"] = _place_at_last_token(
                    torch.tensor(scores, dtype=torch.float32), batch.tensors["response_mask"])

            forward_in = batch.select(tensor_keys=FORWARD_KEYS, non_tensor_keys=[], meta_keys=[])
            with timed("old_log_prob", timings):
                old, _ = actor.dp("compute_log_prob", forward_in)
                batch.union(old)
            needs_ref = cfg.algorithm.use_kl_in_reward
            if needs_ref:
                with timed("ref", timings):
                    ref_out, _ = ref.dp("compute_ref_log_prob", forward_in)
                    batch.union(ref_out)
            if self.estimator.needs_critic:
                with timed("values", timings):
                    values, _ = critic.dp("compute_values", forward_in)
                    batch.union(values)

            with timed("adv", timings):
                mask = batch.tensors["response_mask"].float()
                if needs_ref:
                    rewards, kl_metrics = apply_kl_penalty(
                        batch.tensors["token_level_scores"], batch.tensors["old_log_probs"],
                        batch.tensors["ref_log_probs"], mask, self.kl_ctrl, cfg.algorithm.kl_penalty)
                    metrics.update(kl_metrics)
                else:
                    rewards = batch.tensors["token_level_scores"]
                batch.tensors["token_level_rewards"] = rewards
                advantages, returns = self.estimator(
                    rewards, mask, values=batch.tensors.get("values", None), index=group_index(batch),
                    gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam)
                batch.tensors["advantages"] = advantages
                batch.tensors["returns"] = returns

            if self.estimator.needs_critic:
                with timed("update_critic", timings):
                    critic_in = batch.select(tensor_keys=FORWARD_KEYS + ["values", "returns"], non_tensor_keys=[],
                                             meta_keys=["seed"])
                    metrics.update(_mean_over_ranks(critic.split("update_critic", critic_in)))
            with timed("update_actor", timings):
                actor_in = batch.select(tensor_keys=FORWARD_KEYS + ["old_log_probs", "advantages"],
                                        non_tensor_keys=[], meta_keys=["seed"])
                metrics.update(_mean_over_ranks(actor.split("update_actor", actor_in)))

        metrics["actor/entropy_before_update"] = float(
            (batch.tensors["old_entropy"] * mask).sum() / mask.sum().clamp(min=1))
        metrics.update(data_metrics(batch, cfg.data.max_response_length))
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})
        metrics.update(throughput_metrics(batch, timings["step"], self.num_workers))
        metrics["training/epoch"] = float(self.sampler.epoch)
        self.last_batch = batch
        return metrics

    def fit(self) -> list[dict[str, float]]:
        for step in range(1, self.cfg.trainer.total_steps + 1):
            metrics = self.step(step)
            self.history.append(metrics)
            self.tracker.log(metrics, step)
        return self.history


def _place_at_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Outcome rewards live on each response's last real token; every other token gets 0."""
    # scores: (B,), response_mask: (B, R)
    token_scores = torch.zeros_like(response_mask, dtype=torch.float32)
    last = (response_mask.sum(-1) - 1).clamp(min=0).long()
    token_scores[torch.arange(len(scores)), last] = scores
    return token_scores
