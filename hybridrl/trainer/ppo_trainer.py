"""The PPO loop on the driver: explicit data flow between role groups, one step at a time.

A step is four phases: rollout (generate + score, with optional dynamic sampling: ``RolloutSource`` in
``rollouts.py``, synchronous, overlapped or fully asynchronous), evaluate (old/ref log-probs, values),
advantages (KL in reward + estimator, on the driver), update.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.algorithms.kl_control import apply_kl_penalty, make_kl_controller
from hybridrl.algorithms.roles import ref_in_actor
from hybridrl.algorithms.rollout_correction import rollout_is_weights, rollout_probs_diff
from hybridrl.checkpoint.shards import rng_state
from hybridrl.cluster.errors import system_failure
from hybridrl.cluster.ray_cluster import object_store_stats
from hybridrl.cluster.role_clients import (
    RoleClients,
    colocated_passes,
    run_forward_passes,
)
from hybridrl.config.schema import Config
from hybridrl.data.dataset import PromptDataset
from hybridrl.data.partition import balanced_group_partition, balanced_partition, token_imbalance
from hybridrl.observability.metrics import data_metrics, throughput_metrics
from hybridrl.observability.monitor import RunMonitor
from hybridrl.observability.perf_metrics import StepPerf
from hybridrl.observability.tracking.breakdown import format_breakdown
from hybridrl.observability.tracking.tracker import Tracker
from hybridrl.protocol import Batch
from hybridrl.seeds import step_seed
from hybridrl.trainer.checkpointing import Checkpointing
from hybridrl.trainer.old_log_probs import OldLogProbs, importance_level, old_log_prob_source
from hybridrl.trainer.rewarding import RewardStep
from hybridrl.trainer.rollouts import RolloutSource
from hybridrl.trainer.run_record import RunRecord
from hybridrl.trainer.validation import run_validation

logger = logging.getLogger(__name__)

FORWARD_KEYS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]


def _mean_over_ranks(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


class PPOTrainer:
    def __init__(
        self,
        cfg: Config,
        roles: RoleClients,
        dataset: PromptDataset,
        tracker: Tracker,
        reward: RewardStep,
        *,
        monitor: RunMonitor | None = None,
        perf: StepPerf | None = None,
        checkpointing: Checkpointing | None = None,
        val_dataset: PromptDataset | None = None,
        output_dir: Path | None = None,
        restarts: int = 0,
        record: RunRecord | None = None,
    ) -> None:
        self.cfg = cfg
        self.record = record or RunRecord()  # wall time and legs across resumes, in every checkpoint
        self.restarts = restarts  # recoveries so far in this run (trainer.max_restarts)
        self.val_dataset = val_dataset
        self.output_dir = output_dir
        self._update_started = False
        self.reward = reward
        self.checkpointing = checkpointing  # None: no checkpoints (trainer.save_freq=-1)
        self.monitor = monitor or RunMonitor()
        self.perf = perf
        self.roles = roles
        self.tracker = tracker
        algo = cfg.algorithm
        self.estimator = get_adv_estimator(algo.adv_estimator)
        self.kl_ctrl = make_kl_controller(
            algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon
        )
        self.num_workers = sum(group.world_size for group in roles.groups())
        self.history: list[dict[str, float]] = []
        self.rollouts = RolloutSource(cfg, roles, dataset, reward, self.monitor)
        self.old_log_probs = old_log_prob_source(
            cfg, all(roles.actor_rollout.rollout_log_probs_exact()), overlapped=self.rollouts.overlap
        )
        logger.info("Old log-probs: %s", self.old_log_probs.value)

    def _balance(self, batch: Batch, metrics: dict) -> Batch:
        """Rows reordered so that each data-parallel replica's contiguous share holds about as many real
        tokens (verl's ``balance_batch``): with ragged responses the replica with the longest rows would
        otherwise set every phase's time. GRPO groups travel by ``uid``, not by position; with
        ``use_prefix_grouper`` whole groups move, so that their shared prompt runs once."""
        replicas = self.roles.actor_rollout.train_replicas()
        if replicas == 1 or len(batch) % replicas:
            return batch
        lengths = batch.tensors["attention_mask"].sum(-1).tolist()
        shares = np.array_split(np.arange(len(batch)), replicas)
        bins = None
        if self.cfg.actor_rollout_ref.actor.use_prefix_grouper:  # a prompt's samples stay on one replica
            bins = balanced_group_partition(lengths, batch.non_tensors["uid"].tolist(), replicas)
        if bins is None:
            bins = balanced_partition(lengths, replicas, equal_size=True)
        metrics["train/dp_token_imbalance_before"] = token_imbalance(lengths, shares)
        metrics["train/dp_token_imbalance"] = token_imbalance(lengths, bins)
        return batch[np.concatenate(bins)]

    # -- evaluation ----------------------------------------------------------------------------
    def _evaluate(self, batch: Batch, timings: dict) -> None:
        """The forward passes over the rollouts; those of roles on the same workers go out as one call."""
        forward_in = batch.select(tensor_keys=FORWARD_KEYS, non_tensor_keys=[], meta_keys=[])
        roles, passes = self.roles, []
        if self.old_log_probs == OldLogProbs.PASS:
            passes.append(roles.actor_rollout.log_prob_pass())
        elif self.old_log_probs == OldLogProbs.ROLLOUT:
            batch.tensors["old_log_probs"] = batch.tensors["rollout_log_probs"] * batch.tensors["response_mask"]
        if roles.ref is not None:
            passes.append(roles.ref.ref_pass())
        elif ref_in_actor(self.cfg):
            passes.append(roles.actor_rollout.ref_pass())
        if roles.critic is not None:
            passes.append(roles.critic.values_pass())
        for together in colocated_passes(passes):
            if len(together) == 1:
                with self.monitor.phase(together[0].phase, timings):
                    batch.union(run_forward_passes(together, forward_in)[0])
                continue
            # One call: each pass is timed on the workers; the one dispatch falls into "other".
            out, seconds = run_forward_passes(together, forward_in)
            batch.union(out)
            for phase, elapsed in seconds.items():
                timings[phase] = timings.get(phase, 0.0) + elapsed

    def _rollout_gap(self, batch: Batch, metrics: dict) -> None:
        """How far the rollout engine's log-probs are from the trainer's, and (``rollout_correction``) the
        truncated importance weights that correct the policy loss for it."""
        t = batch.tensors
        if self.old_log_probs != OldLogProbs.PASS or "rollout_log_probs" not in t.keys():
            return  # no trainer log-probs to compare with before the update
        mask = t["response_mask"]
        metrics.update(rollout_probs_diff(t["old_log_probs"], t["rollout_log_probs"], mask))
        level = importance_level(self.cfg)
        if level is not None:
            t["rollout_is_weights"], is_metrics = rollout_is_weights(
                t["old_log_probs"],
                t["rollout_log_probs"],
                mask,
                level,
                self.cfg.algorithm.rollout_correction.rollout_is_threshold,
            )
            metrics.update(is_metrics)

    def _advantages(self, batch: Batch, metrics: dict) -> None:
        algo = self.cfg.algorithm
        t = batch.tensors
        mask = t["response_mask"].float()
        if algo.use_kl_in_reward:
            rewards, kl_metrics = apply_kl_penalty(
                t["token_level_scores"], t["old_log_probs"], t["ref_log_probs"], mask, self.kl_ctrl, algo.kl_penalty
            )
            metrics.update(kl_metrics)
        else:
            rewards = t["token_level_scores"]
        t["token_level_rewards"] = rewards
        t["advantages"], t["returns"] = self.estimator(
            rewards,
            mask,
            values=t.get("values", None),
            index=batch.non_tensors["uid"],
            gamma=algo.gamma,
            lam=algo.lam,
            norm_adv_by_std_in_grpo=algo.norm_adv_by_std_in_grpo,
            reward_baselines=t.get("reward_baselines", None),
        )

    # -- update --------------------------------------------------------------------------------
    def _update(self, step: int, batch: Batch, timings: dict, metrics: dict) -> None:
        self._update_started = True
        if self.roles.critic is not None:
            with self.monitor.phase("update_critic", timings):
                critic_in = batch.select(
                    tensor_keys=FORWARD_KEYS + ["values", "returns"], non_tensor_keys=[], meta_keys=["seed"]
                )
                metrics.update(_mean_over_ranks(self.roles.critic.update_critic(critic_in)))
        if step < self.cfg.trainer.critic_warmup:  # verl's: the critic learns alone for the first steps
            return
        with self.monitor.phase("update_actor", timings):
            keys = FORWARD_KEYS + ["advantages"]
            if "old_log_probs" in batch.tensors.keys():
                keys.append("old_log_probs")
            if self.cfg.actor_rollout_ref.actor.use_kl_loss:
                keys.append("ref_log_probs")
            if "rollout_is_weights" in batch.tensors.keys():
                keys.append("rollout_is_weights")
            actor_in = batch.select(tensor_keys=keys, non_tensor_keys=[], meta_keys=["seed"])
            metrics.update(_mean_over_ranks(self.roles.actor_rollout.update_actor(actor_in)))

    def validate(self, step: int) -> dict[str, float]:
        if self.val_dataset is None:
            return {}
        with self.rollouts.current_weights():
            generator = self.rollouts.generator
            return run_validation(self.cfg, generator, self.reward, self.val_dataset, step, self.output_dir)

    def step(self, step: int, save_checkpoint: bool = False, validate: bool = False) -> dict[str, float]:
        timings: dict[str, float] = {}
        metrics: dict[str, float] = {}
        self._update_started = False
        with self.monitor.phase("step", timings):
            batch = self.rollouts.batch(step, timings, metrics)
            if self.cfg.trainer.balance_batch:
                batch = self._balance(batch, metrics)
            batch.meta["seed"] = step_seed(self.cfg.trainer.seed, step)
            self._evaluate(batch, timings)
            self._rollout_gap(batch, metrics)
            with self.monitor.phase("adv", timings):
                self._advantages(batch, metrics)
            self._update(step, batch, timings, metrics)
            self.rollouts.after_update(step, timings, metrics)
            if validate and self.val_dataset is not None:
                with self.monitor.phase("validation", timings):
                    metrics.update(self.validate(step))
            if save_checkpoint:
                with self.monitor.phase("checkpoint", timings):
                    self.save_checkpoint(step)
        mask = batch.tensors["response_mask"].float()
        if "old_entropy" in batch.tensors.keys():  # with the separate old-log-prob pass (actor/entropy otherwise)
            metrics["actor/entropy_before_update"] = float(
                (batch.tensors["old_entropy"] * mask).sum() / mask.sum().clamp(min=1)
            )
        metrics.update(data_metrics(batch, self.cfg.data.max_response_length))
        metrics.update({f"timing_s/{k}": v for k, v in timings.items()})
        metrics.update(throughput_metrics(batch, timings["step"], self.num_workers))
        if self.rollouts.rollouter is not None:
            metrics["fully_async/trainer/idle_ratio"] = timings["gen"] / max(timings["step"], 1e-9)
        if self.perf is not None:
            metrics.update(self.perf.metrics(batch, timings))
        metrics.update(self.monitor.step_metrics())
        metrics["training/epoch"] = float(self.rollouts.sampler.epoch)
        metrics["train/restarts"] = float(self.restarts)
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The driver's part of a checkpoint: data position, KL controller, driver RNG."""
        return {
            **self.rollouts.state_dict(),
            "kl_ctrl": self.kl_ctrl.state_dict(),
            "driver_rng": rng_state()[0],
            "run": self.record.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rollouts.load_state_dict(state)
        self.kl_ctrl.load_state_dict(state["kl_ctrl"])
        version, rng, gauss = state["driver_rng"]["python"]
        random.setstate((version, tuple(rng), gauss))

    def save_checkpoint(self, step: int) -> None:
        assert self.checkpointing is not None, "checkpoints are off (trainer.save_freq=-1)"
        self.checkpointing.save(step, self.state_dict())

    def fit(self, start_step: int = 0) -> list[dict[str, float]]:
        try:
            return self._fit(start_step)
        finally:
            self.rollouts.stop()

    def _fit(self, start_step: int) -> list[dict[str, float]]:
        trainer_cfg = self.cfg.trainer
        state_before = self.state_dict()
        if trainer_cfg.val_before_train and self.val_dataset is not None and start_step == 0:
            val = self.validate(0)
            logger.info("Validation before training: %s", val)
            self.tracker.log(val, 0)
        for step in range(start_step + 1, trainer_cfg.total_steps + 1):
            last = step == trainer_cfg.total_steps
            save = self.checkpointing is not None and self.checkpointing.due(step)
            validate = trainer_cfg.test_freq > 0 and (last or step % trainer_cfg.test_freq == 0)
            try:
                metrics = self.step(step, save_checkpoint=save, validate=validate)
            except Exception as exc:
                # A dead or stuck rank cannot save; after an update the workers no longer hold step - 1.
                if self.checkpointing is not None and not system_failure(exc) and not self._update_started:
                    self.checkpointing.save_before_failure(step, state_before)
                raise
            state_before = self.state_dict()
            if trainer_cfg.cluster_stats_interval and step % trainer_cfg.cluster_stats_interval == 0:
                metrics.update(object_store_stats())
            self.history.append(metrics)
            self.tracker.log(metrics, step)
            if last or (trainer_cfg.breakdown_interval and step % trainer_cfg.breakdown_interval == 0):
                logger.info(
                    "Phase breakdown, steps %d-%d (step 1 left out: one-time costs):\n%s",
                    min(2, step),
                    step,
                    format_breakdown(self.history, skip_first=1),
                )
        return self.history
