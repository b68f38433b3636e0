"""Where a step's scored rollouts come from: generation on the actor's workers, on a rollout pool of its own
(each step, or one step ahead with ``rollout.overlap``), or from the fully asynchronous generator
(``Rollouter``), with DAPO's dynamic sampling drawing more rounds. The trainer asks for a step's batch, says
when an update is done (a fully asynchronous run's sync trigger), and checkpoints the data position through
this object: it owns the prompt sampler, the weight hand-over to a rollout pool and what is in flight."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.algorithms.filtering import groups_with_signal
from hybridrl.cluster.role_clients import ActorRolloutClient, RoleClients, RolloutClient
from hybridrl.config.schema import Config
from hybridrl.data.dataset import EpochSampler, PromptDataset
from hybridrl.generation.generation import GEN_KEYS, generation_inputs
from hybridrl.observability.monitor import RunMonitor
from hybridrl.protocol import Batch
from hybridrl.seeds import rollout_seed
from hybridrl.trainer.rewarding import RewardStep
from hybridrl.trainer.rollout_pool import Prefetched, SeparateRollout
from hybridrl.trainer.rollouter import Rollouter

logger = logging.getLogger(__name__)

REWARD_EXTRA = "reward_extra/"  # non-tensor columns of the values a reward function returned in its dict


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


class RolloutSource:
    def __init__(
        self, cfg: Config, roles: RoleClients, dataset: PromptDataset, reward: RewardStep, monitor: RunMonitor
    ) -> None:
        self.cfg, self.roles, self.dataset, self.reward, self.monitor = cfg, roles, dataset, reward, monitor
        filt = cfg.algorithm.filter_groups
        # DAPO's dynamic sampling draws data.gen_batch_size prompts per generation round (verl's loader batch).
        per_round = cfg.data.gen_batch_size if filt.enable and cfg.data.gen_batch_size else cfg.data.train_batch_size
        self.sampler = EpochSampler(len(dataset), per_round, cfg.data.shuffle, cfg.data.seed)
        self.estimator = get_adv_estimator(cfg.algorithm.adv_estimator)
        rollout = cfg.actor_rollout_ref.rollout
        # Generation on the actor's workers, or on a rollout pool of its own (weights handed over to it).
        self.generator: ActorRolloutClient | RolloutClient = roles.rollout or roles.actor_rollout
        self.separate = (
            SeparateRollout(roles.actor_rollout, roles.rollout, rollout, cfg.trainer.ray.call_timeout_s)
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
        if self.separate is not None and self.rollouter is None:
            logger.info(
                "Generation on a rollout pool of its own; %s",
                "the next step's overlaps this step's training (one step off-policy)"
                if self.overlap
                else "each step generates, then trains",
            )

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

    def after_update(self, step: int, timings: dict, metrics: dict) -> None:
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

    def batch(self, step: int, timings: dict, metrics: dict) -> Batch:
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

    @contextlib.contextmanager
    def current_weights(self) -> Iterator[None]:
        """Generation on the actor's current weights for the duration (validation): a rollout pool gets
        them first; the fully asynchronous generator pauses between two calls, on the weights of its last
        sync (every step's with trigger_parameter_sync_step=1)."""
        if self.rollouter is not None and self.rollouter.running:
            with self.rollouter.between_calls():
                yield
            return
        if self.separate is not None:
            self.separate.hand_over()
        yield

    def stop(self) -> None:
        """Responses still in flight are given up (a resumed run draws their prompts again)."""
        if self.rollouter is not None:
            self.rollouter.stop()

    def state_dict(self) -> dict[str, Any]:
        """The data position: the prompts not yet trained on are drawn again by a resumed run (a generation
        started for the next step drew its prompts already), and the fully asynchronous generator's counts."""
        sampler = self.prefetched.sampler_state if self.prefetched is not None else self.sampler.state_dict()
        if self.rollouter is None:
            return {"sampler": sampler}
        asynchronous = self.rollouter.state_dict()
        return {"sampler": asynchronous["sampler"], "async": asynchronous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        if self.rollouter is not None and "async" in state:
            self.rollouter.load_state_dict(state["async"])
