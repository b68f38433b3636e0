"""The PPO loop on the driver: explicit data flow between role groups, one step at a time.

A step is four phases, each a method: rollout (generate + score, with optional dynamic sampling),
evaluate (old/ref log-probs, values), advantages (KL in reward + estimator, on the driver), update.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.algorithms.filtering import groups_with_signal
from hybridrl.algorithms.kl_control import apply_kl_penalty, make_kl_controller
from hybridrl.algorithms.roles import ref_in_actor
from hybridrl.algorithms.rollout_correction import rollout_is_weights, rollout_probs_diff
from hybridrl.checkpoint.shards import rng_state
from hybridrl.cluster.errors import system_failure
from hybridrl.cluster.ray_cluster import object_store_stats
from hybridrl.cluster.role_clients import (
    ActorRolloutClient,
    RoleClients,
    RolloutClient,
    colocated_passes,
    run_forward_passes,
)
from hybridrl.config.schema import Config
from hybridrl.data.dataset import EpochSampler, PromptDataset
from hybridrl.data.partition import balanced_group_partition, balanced_partition, token_imbalance
from hybridrl.generation.generation import GEN_KEYS, generation_inputs
from hybridrl.observability.metrics import data_metrics, throughput_metrics
from hybridrl.observability.monitor import RunMonitor
from hybridrl.observability.perf_metrics import StepPerf
from hybridrl.observability.tracking.breakdown import format_breakdown
from hybridrl.observability.tracking.tracker import Tracker
from hybridrl.protocol import Batch
from hybridrl.seeds import rollout_seed, step_seed
from hybridrl.trainer.checkpointing import Checkpointing
from hybridrl.trainer.old_log_probs import OldLogProbs, importance_level, old_log_prob_source
from hybridrl.trainer.rewarding import RewardStep
from hybridrl.trainer.rollout_pool import Prefetched, SeparateRollout
from hybridrl.trainer.rollouter import Rollouter
from hybridrl.trainer.run_record import RunRecord
from hybridrl.trainer.validation import run_validation

logger = logging.getLogger(__name__)

FORWARD_KEYS = ["input_ids", "attention_mask", "position_ids", "responses", "response_mask"]
REWARD_EXTRA = "reward_extra/"  # non-tensor columns of the values a reward function returned in its dict


def _mean_over_ranks(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}


def filter_values(batch: Batch, metric: str | None) -> torch.Tensor:
    """The per-sequence value whose spread keeps a group (``algorithm.filter_groups.metric``): the
    sequence's reward (``seq_reward``, ``seq_final_reward``, ``score``: KL in the reward comes later, so
    these are one value here) or a key the reward function returned in its dict (DAPO's ``acc``)."""
    if metric in (None, "seq_reward", "seq_final_reward", "score"):
        return batch.tensors["token_level_scores"].sum(-1)
    extras = {k.removeprefix(REWARD_EXTRA): v for k, v in batch.non_tensors.items() if k.startswith(REWARD_EXTRA)}
    if metric not in extras:
        raise ValueError(
            f"algorithm.filter_groups.metric={metric}: the reward function returned no '{metric}' "
            f"(its dict had {sorted(extras) or 'no extra keys'}); use seq_reward or one of those keys."
        )
    return torch.as_tensor(np.asarray(extras[metric], dtype=np.float64))


def _place_at_last_token(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Outcome rewards live on each response's last model token (a multi-turn response's mask has gaps where
    tools answered); every other token gets 0."""
    # scores: (B,), response_mask: (B, R)
    token_scores = torch.zeros_like(response_mask, dtype=torch.float32)
    positions = torch.arange(1, response_mask.shape[1] + 1, device=response_mask.device)
    last = ((response_mask > 0) * positions).argmax(-1)  # 0 where a row has no model token
    token_scores[torch.arange(len(scores)), last] = scores
    return token_scores


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
        self.dataset = dataset
        self.tracker = tracker
        filt = cfg.algorithm.filter_groups
        # DAPO's dynamic sampling draws data.gen_batch_size prompts per generation round (verl's loader batch).
        per_round = cfg.data.gen_batch_size if filt.enable and cfg.data.gen_batch_size else cfg.data.train_batch_size
        self.sampler = EpochSampler(len(dataset), per_round, cfg.data.shuffle, cfg.data.seed)
        algo = cfg.algorithm
        self.estimator = get_adv_estimator(algo.adv_estimator)
        self.kl_ctrl = make_kl_controller(
            algo.kl_ctrl.type, algo.kl_ctrl.kl_coef, algo.kl_ctrl.target_kl, algo.kl_ctrl.horizon
        )
        self.num_workers = sum(group.world_size for group in roles.groups())
        self.history: list[dict[str, float]] = []
        rollout = cfg.actor_rollout_ref.rollout
        # Generation on the actor's workers, or on a rollout pool of its own (weights handed over to it).
        self.generator: ActorRolloutClient | RolloutClient = roles.rollout or roles.actor_rollout
        self.separate = (
            SeparateRollout(
                roles.actor_rollout, roles.rollout, cfg.actor_rollout_ref.rollout, cfg.trainer.ray.call_timeout_s
            )
            if roles.rollout is not None
            else None
        )
        self.overlap = rollout.overlap and self.separate is not None
        # Fully asynchronous training: a generator thread keeps the rollout pool busy (trainer/rollouter.py).
        self.rollouter = (
            Rollouter(cfg, roles.rollout, dataset, self.sampler)
            if cfg.async_training.enable and roles.rollout is not None
            else None
        )
        self.prefetched: Prefetched | None = None
        self.old_log_probs = old_log_prob_source(
            cfg, all(roles.actor_rollout.rollout_log_probs_exact()), overlapped=self.overlap
        )
        logger.info("Old log-probs: %s", self.old_log_probs.value)
        if self.separate is not None and self.rollouter is None:
            logger.info(
                "Generation on a rollout pool of its own; %s",
                "the next step's overlaps this step's training (one step off-policy)"
                if self.overlap
                else "each step generates, then trains",
            )

    # -- rollout -------------------------------------------------------------------------------
    def _prompts(self, step: int, round_: int) -> tuple[Batch, Batch, Batch]:
        """This step's prompts, their rows (each prompt ``rollout.n`` times) and the generation inputs."""
        n = self.cfg.actor_rollout_ref.rollout.n
        prompts = self.dataset.collate(self.sampler.next_indices())
        # Group ids unique per step and round: rows sampled from one prompt share it (GRPO groups).
        prompts.non_tensors["uid"] = np.array([f"{step}.{round_}.{i}" for i in range(len(prompts))], dtype=object)
        batch = prompts.repeat(n, interleave=True)
        gen_in = generation_inputs(batch, self.cfg.actor_rollout_ref.rollout.multi_turn.enable)
        gen_in.meta = {"seed": rollout_seed(self.cfg.trainer.seed, step, round_)}
        return prompts, batch, gen_in

    def _hand_over(self, timings: dict, metrics: dict) -> None:
        """A rollout pool of its own gets the actor's current weights (if it lacks them) before it generates;
        what moved and how fast go into ``metrics`` (``weight_sync/mb``, ``weight_sync/gb_per_s``)."""
        if self.separate is not None:
            with self.monitor.phase("weight_handover", timings):
                metrics.update(self.separate.hand_over().metrics())

    def _start_generation(self, gen_in: Batch) -> Callable[[], Batch]:
        """Generation started on the generating workers; the returned function waits for the responses."""
        if self.separate is None:
            return lambda: self.roles.actor_rollout.generate(gen_in)
        return self.separate.rollout.submit_generate(gen_in)

    def _take_async(self, timings: dict, metrics: dict) -> Batch:
        """The next step's finished groups from the generator thread (started at the first step, after the
        first hand-over); ``timing_s/gen`` is the trainer's wait for them."""
        assert self.rollouter is not None
        if self.rollouter.thread is None:
            self._hand_over(timings, metrics)
            self.rollouter.start()
        with self.monitor.phase("gen", timings):
            batch, async_metrics = self.rollouter.take()
        metrics.update(async_metrics)
        return batch

    def _sync_async(self, step: int, timings: dict, metrics: dict) -> None:
        """Every ``trigger_parameter_sync_step`` steps the generator gets the new weights between two calls.
        Generation ends with the last step (a final validation then gets the weights as in every layout)."""
        if self.rollouter is None:
            return
        if step == self.cfg.trainer.total_steps:
            self.rollouter.stop()
            return
        if step % self.cfg.async_training.trigger_parameter_sync_step == 0:
            assert self.separate is not None
            with self.monitor.phase("weight_handover", timings):
                metrics.update(self.rollouter.sync(self.separate.hand_over).metrics())

    def _generate_and_score(self, step: int, round_: int, timings: dict, metrics: dict) -> Batch:
        cfg = self.cfg
        seed = rollout_seed(cfg.trainer.seed, step, round_)
        if self.rollouter is not None:
            return self._score(self._take_async(timings, metrics), None, seed, timings, metrics)
        prefetched, self.prefetched = self.prefetched, None
        if prefetched is not None and (prefetched.step != step or round_):  # not this round's: drawn again
            self.sampler.load_state_dict(prefetched.sampler_state)
            prefetched = None
        with self.monitor.phase("data", timings):
            if prefetched is None:
                prompts, batch, gen_in = self._prompts(step, round_)
            else:
                prompts, batch = prefetched.prompts, prefetched.batch
        if prefetched is None:
            self._hand_over(timings, metrics)
        with self.monitor.phase("gen", timings):
            batch.union(prefetched.responses() if prefetched is not None else self._start_generation(gen_in)())
            metrics.update(RunMonitor.sub_span_timings(self.generator.last_results))
        if self.overlap and step < cfg.trainer.total_steps:
            # The next step's generation runs while this step scores and trains, on the weights before
            # this step's update (the rollout workers are idle now: the hand-over waits for nobody).
            self._hand_over(timings, metrics)
            sampler_state = self.sampler.state_dict()
            next_prompts, next_batch, next_in = self._prompts(step + 1, 0)
            self.prefetched = Prefetched(
                step + 1, next_prompts, next_batch, self._start_generation(next_in), sampler_state
            )
        return self._score(batch, prompts, seed, timings, metrics)

    def _score(self, batch: Batch, prompts: Batch | None, seed: int, timings: dict, metrics: dict) -> Batch:
        """The rewards of ``batch``'s responses on their last tokens; ReMax's greedy baseline from ``prompts``."""
        cfg = self.cfg
        n = cfg.actor_rollout_ref.rollout.n
        actor = self.generator
        with self.monitor.phase("reward", timings):
            rewards = self.reward(batch, metrics)
            batch.tensors["token_level_scores"] = _place_at_last_token(rewards.scores, batch.tensors["response_mask"])
            if cfg.algorithm.filter_groups.enable:  # what a filter metric such as acc reads
                for key, values in rewards.extras.items():
                    batch.non_tensors[REWARD_EXTRA + key] = values.numpy()
        if self.estimator.needs_greedy_baseline:
            assert prompts is not None, "ReMax's greedy pass is not supported with fully asynchronous training"
            with self.monitor.phase("gen_max", timings):  # ReMax: the greedy response's reward is the baseline
                greedy_in = generation_inputs(
                    prompts.select(tensor_keys=GEN_KEYS, meta_keys=[]), cfg.actor_rollout_ref.rollout.multi_turn.enable
                )
                greedy_sampling = dataclasses.replace(self.cfg.actor_rollout_ref.rollout.sampling(), do_sample=False)
                greedy_in.meta = {"seed": seed, "sampling": greedy_sampling}
                greedy = actor.generate(greedy_in)
                greedy.non_tensors.update(prompts.select(tensor_keys=[], meta_keys=[]).non_tensors)
                batch.tensors["reward_baselines"] = self.reward(greedy).scores.repeat_interleave(n)
        return batch

    def _rollout(self, step: int, timings: dict, metrics: dict) -> Batch:
        """One batch of scored rollouts; DAPO's dynamic sampling drops groups with no signal."""
        filt = self.cfg.algorithm.filter_groups
        if not filt.enable:
            return self._generate_and_score(step, 0, timings, metrics)
        n = self.cfg.actor_rollout_ref.rollout.n
        wanted = self.cfg.data.train_batch_size * n
        kept: list[Batch] = []
        dropped: list[Batch] = []
        for round_ in range(filt.max_num_gen_batches):
            batch = self._generate_and_score(step, round_, timings, metrics)
            batch.meta = {}
            keep = groups_with_signal(filter_values(batch, filt.metric), batch.non_tensors["uid"])
            kept.append(batch[np.flatnonzero(keep)])
            dropped.append(batch[np.flatnonzero(~keep)])
            if sum(len(b) for b in kept) >= wanted:
                break
        n_kept = sum(len(b) for b in kept)
        metrics["train/num_gen_batches"] = float(round_ + 1)
        metrics["train/kept_group_frac"] = n_kept / (len(kept) * wanted)
        # Groups stay whole: the filter keeps or drops all n rows of a prompt, in order.
        metrics["train/topped_up_groups"] = float(max(0, wanted - n_kept) // n)
        if n_kept < wanted:
            logger.warning(
                "Dynamic sampling kept %d of %d sequences after %d rounds; topping up with "
                "groups whose rewards are all equal (raise algorithm.filter_groups.max_num_gen_batches).",
                n_kept,
                wanted,
                round_ + 1,
            )
        return Batch.concat([b for b in kept + dropped if len(b)])[:wanted]

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
        if self.rollouter is not None and self.rollouter.running:
            # Between two generation calls, on the weights of the last sync (every step's with
            # trigger_parameter_sync_step=1).
            with self.rollouter.between_calls():
                return run_validation(self.cfg, self.generator, self.reward, self.val_dataset, step, self.output_dir)
        if self.separate is not None:
            self.separate.hand_over()
        return run_validation(self.cfg, self.generator, self.reward, self.val_dataset, step, self.output_dir)

    def step(self, step: int, save_checkpoint: bool = False, validate: bool = False) -> dict[str, float]:
        timings: dict[str, float] = {}
        metrics: dict[str, float] = {}
        self._update_started = False
        with self.monitor.phase("step", timings):
            batch = self._rollout(step, timings, metrics)
            if self.cfg.trainer.balance_batch:
                batch = self._balance(batch, metrics)
            batch.meta["seed"] = step_seed(self.cfg.trainer.seed, step)
            self._evaluate(batch, timings)
            self._rollout_gap(batch, metrics)
            with self.monitor.phase("adv", timings):
                self._advantages(batch, metrics)
            self._update(step, batch, timings, metrics)
            self._sync_async(step, timings, metrics)
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
        if self.rollouter is not None:
            metrics["fully_async/trainer/idle_ratio"] = timings["gen"] / max(timings["step"], 1e-9)
        if self.perf is not None:
            metrics.update(self.perf.metrics(batch, timings))
        metrics.update(self.monitor.step_metrics())
        metrics["training/epoch"] = float(self.sampler.epoch)
        metrics["train/restarts"] = float(self.restarts)
        return metrics

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The driver's part of a checkpoint: data position, KL controller, driver RNG."""
        # A generation started for the next step drew its prompts already: a resumed run draws them again.
        sampler = self.prefetched.sampler_state if self.prefetched is not None else self.sampler.state_dict()
        asynchronous = self.rollouter.state_dict() if self.rollouter is not None else None
        state: dict[str, Any] = {
            "sampler": sampler if asynchronous is None else asynchronous["sampler"],
            "kl_ctrl": self.kl_ctrl.state_dict(),
            "driver_rng": rng_state()[0],
            "run": self.record.state_dict(),
        }
        if asynchronous is not None:  # the oldest prompts not yet trained, and the generator's counts
            state["async"] = asynchronous
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.rollouter is not None and "async" in state:
            self.rollouter.load_state_dict(state["async"])
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
            if self.rollouter is not None:  # responses still in flight are given up (a resume draws them again)
                self.rollouter.stop()

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
