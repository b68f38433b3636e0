"""Fully asynchronous training's generator: a driver thread that keeps the rollout pool generating while the
trainer trains (verl's fully_async_policy Rollouter; AReaL's and slime's asynchronous generation).

The thread draws prompts, starts their groups within a quota and calls the rollout workers again and again;
finished groups wait in a buffer the trainer takes whole groups from as soon as a step's worth is there.

- **Quota** (``async_training.staleness_threshold`` = s, verl's meaning): a sync window is
  ``trigger_parameter_sync_step`` steps of ``train_batch_size`` groups (W). Once the generation workers hold
  weights version v, at most (v + 1 + s) x W groups have been started in all; so s = 0 is synchronous
  training, and the thread pauses when the buffer and the calls in flight hold (1 + s) x W unconsumed groups.
- **Staleness bound**: a group whose first token is more than ceil(s) versions behind the current one is
  dropped when the trainer would take it (or while it is still generating) and its prompt generated again
  from scratch: not lost, never trained stale; ``fully_async/count/dropped_stale_samples`` counts them.
- **Partial rollouts** (``partial_rollout`` with s > 0): a call returns as soon as the groups the trainer still
  lacks are finished, and a weight sync interrupts the call in flight at its next token (the hf engine; other
  engines return after ``partial_rollout_tokens``). Unfinished responses go on in the next call, from their
  prompt and tokens so far, under whatever weights the workers then hold, beside newly started groups; each
  token keeps the version that generated it. Without partial rollouts a call runs its responses to the end,
  so a sync waits for all of them (verl's behaviour).

A call is one blocking Ray call on this thread; a sync (``sync``) waits until no call runs and none starts,
then hands the weights over. Errors on the thread (a dead rollout worker) are raised in the trainer's next
``take``, so ``trainer.max_restarts`` recovers the run as in every other layout.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch

from hybridrl.cluster.role_clients import RolloutClient
from hybridrl.config.choices import RolloutName
from hybridrl.config.schema import Config
from hybridrl.data.dataset import EpochSampler, PromptDataset
from hybridrl.generation.generation import GROUP_ID, STOPPED, generation_inputs
from hybridrl.protocol import Batch
from hybridrl.seeds import rollout_seed
from hybridrl.trainer.async_samples import Sample, SampleGroup, finished_batch, generation_call, version_metrics

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Rollouter:
    def __init__(self, cfg: Config, rollout: RolloutClient, dataset: PromptDataset, sampler: EpochSampler) -> None:
        self.cfg, self.rollout, self.dataset, self.sampler = cfg, rollout, dataset, sampler
        acfg = cfg.async_training
        self.n = cfg.actor_rollout_ref.rollout.n
        self.step_groups = cfg.data.train_batch_size
        self.window = acfg.trigger_parameter_sync_step * self.step_groups
        self.staleness = acfg.staleness_threshold
        self.max_lag = acfg.max_version_lag
        self.segmented = acfg.partial_rollout and acfg.staleness_threshold > 0
        self.segment_tokens = acfg.partial_rollout_tokens
        self.interruptible = cfg.actor_rollout_ref.rollout.name == RolloutName.hf
        self.interrupted_call = 0  # the last call asked to stop
        self.call_for_trainer = False  # the call in flight returns once the groups the trainer lacks are done
        self.max_response_length = cfg.data.max_response_length
        self.pad_token_id = dataset.tokenizer.pad_token_id
        self.cond = threading.Condition()
        self.version = 0  # weight syncs so far: the version the generation workers hold
        self.started = 0  # groups started, less those dropped (the quota's count)
        self.next_draw = 1  # draws are numbered from 1, as steps are: at s = 0 draw k is step k's prompts
        self.calls = 0
        self.draw_state: dict[int, dict[str, Any]] = {}  # draw -> the sampler's position before it
        self.consumed: dict[int, set[int]] = {}  # draw -> positions trained (kept while the draw is open)
        self.skip: dict[int, set[int]] = {}  # from a checkpoint: positions of open draws trained before it
        self.waiting: deque[SampleGroup] = deque()  # drawn (or dropped), not started
        self.in_flight: list[SampleGroup] = []
        self.ready: deque[SampleGroup] = deque()
        self.counts = {"total_generated_samples": 0, "stale_samples_processed": 0, "dropped_stale_samples": 0}
        self.error: BaseException | None = None
        self.calling = False
        self.sync_requested = False
        self.stopping = False
        self.idle_s = 0.0  # the thread's time with nothing it may do (quota spent, or a sync in progress)
        self.since = time.perf_counter()
        self.thread: threading.Thread | None = None

    # -- the trainer's side ----------------------------------------------------------------------
    def start(self) -> None:
        """Generation starts on the weights the rollout workers hold (version ``self.version``)."""
        self.since = time.perf_counter()
        self.thread = threading.Thread(target=self._run, name="rollouter", daemon=True)
        self.thread.start()
        logger.info(
            "Fully asynchronous generation: windows of %d groups (%d step(s) between weight syncs), staleness %.2f "
            "(at most %d versions behind), %s",
            self.window,
            self.cfg.async_training.trigger_parameter_sync_step,
            self.staleness,
            self.max_lag,
            "whole responses per call"
            if not self.segmented
            else "partial rollouts, interrupted at the next token"
            if self.interruptible
            else f"partial rollouts in segments of {self.segment_tokens} tokens",
        )

    @property
    def running(self) -> bool:
        return self.thread is not None and not self.stopping

    def take(self) -> tuple[Batch, dict[str, float]]:
        """The next step's groups, oldest finished first (waiting until they are there), as a batch, and the
        step's ``fully_async/*`` figures."""
        with self.cond:
            while True:
                self._raise_error()
                if self._drop_stale(self.ready):
                    self.cond.notify_all()  # the generator starts them again
                if len(self.ready) >= self.step_groups:
                    break
                if self.calling and not self.call_for_trainer:  # a call that would run to its last response
                    self._interrupt()
                self.cond.wait()
            groups = [self.ready.popleft() for _ in range(self.step_groups)]
            for group in groups:
                self._mark_consumed(group)
            metrics = version_metrics(groups, self.version)
            samples = len(groups) * self.n
            self.counts["stale_samples_processed"] += sum(
                1 for g in groups for s in g.samples if s.versions and self.version - s.versions[0] >= 1
            )
            now = time.perf_counter()
            metrics.update({f"fully_async/count/{k}": float(v) for k, v in self.counts.items()})
            metrics["fully_async/count/current_param_version"] = float(self.version)
            metrics["fully_async/monitor/queue/mq_queue_size"] = float(len(self.ready) * self.n)
            metrics["fully_async/monitor/in_flight_samples"] = float(len(self.in_flight) * self.n)
            metrics["fully_async/rollouter/idle_ratio"] = self.idle_s / max(now - self.since, 1e-9)
            self.idle_s, self.since = 0.0, now
            self.cond.notify_all()
        batch = finished_batch(groups, self.pad_token_id, self.max_response_length, self.dataset.tokenizer)
        assert len(batch) == samples
        return batch, metrics

    def sync(self, hand_over: Callable[[], T]) -> T:
        """Hand the trainer's new weights over between two calls (``hand_over`` moves them), then count a
        version: the calls after it generate with them."""
        with self.between_calls():
            result = hand_over()
            with self.cond:
                self.version += 1
            return result

    @contextlib.contextmanager
    def between_calls(self) -> Iterator[None]:
        """No generation call runs inside (one running is waited for): the rollout workers are free for a
        hand-over or validation."""
        with self.cond:
            self.sync_requested = True
            if self.calling:
                self._interrupt()
            while self.calling:
                self.cond.wait()
        try:
            yield
        finally:
            with self.cond:
                self.sync_requested = False
                self.cond.notify_all()

    def stop(self) -> None:
        """Stop the thread after its current call (responses in flight are given up: a resumed run draws
        their prompts again)."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=600)

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The data position of the oldest draw with a group not yet trained, and which of its (and later
        draws') groups were trained: a resumed run draws those prompts again and generates the rest anew."""
        with self.cond:
            first = min(self.draw_state, default=self.next_draw)  # a draw is kept until all its groups trained
            sampler = self.draw_state[first] if self.draw_state else self.sampler.state_dict()
            trained = {d: sorted(positions) for d, positions in {**self.skip, **self.consumed}.items()}
            return {
                "sampler": dict(sampler),
                "draw": first,
                "trained": {str(d): p for d, p in trained.items() if p},
                "version": self.version,
                "calls": self.calls,
                "counts": dict(self.counts),
            }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self.next_draw = int(state["draw"])
        self.skip = {int(d): set(p) for d, p in state["trained"].items()}
        self.version = int(state["version"])
        self.calls = int(state["calls"])
        self.counts.update(state["counts"])
        # Groups started before the checkpoint are generated again: the quota counts from this version.
        self.started = self.version * self.window

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self.cond:
                    call = self._next_call()
                    if call is None:
                        return
                    batch, samples, version = call
                    self.calling = True
                try:
                    out = self.rollout.generate(batch)
                finally:
                    with self.cond:
                        self.calling = False
                        self.cond.notify_all()
                with self.cond:
                    self._take_outputs(samples, out, version)
                    self.cond.notify_all()
        except BaseException as exc:  # handed to the trainer's thread, which raises it
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _next_call(self) -> tuple[Batch, list[Sample], int] | None:
        """Wait (under ``cond``) until a call may start; None when stopping."""
        while True:
            if self.stopping:
                return None
            if not self.sync_requested:
                self._drop_stale(self.in_flight)
                self._start_groups()
                samples = [s for g in self.in_flight for s in g.samples if not s.finished]
                if samples:
                    return self._call(self.in_flight, samples), samples, self.version
            waited = time.perf_counter()
            self.cond.wait()
            self.idle_s += time.perf_counter() - waited

    def _quota(self) -> int:
        return math.floor((self.version + 1 + self.staleness) * self.window + 1e-9)

    def _start_groups(self) -> None:
        while self.started < self._quota():
            if not self.waiting:
                self._draw()
                continue
            group = self.waiting.popleft()
            group.started_version = self.version
            self.in_flight.append(group)
            self.started += 1

    def _draw(self) -> None:
        """One data-loader batch of prompts (``train_batch_size``, as a synchronous step draws), each
        repeated ``rollout.n`` times, its groups queued to start."""
        draw = self.next_draw
        self.next_draw += 1
        self.draw_state[draw] = self.sampler.state_dict()
        prompts = self.dataset.collate(self.sampler.next_indices())
        prompts.non_tensors["uid"] = np.array([f"{draw}.0.{i}" for i in range(len(prompts))], dtype=object)
        rows = prompts.repeat(self.n, interleave=True)
        gen_in = generation_inputs(rows, multi_turn=False)
        ids, mask = gen_in.tensors["input_ids"], gen_in.tensors["attention_mask"]
        skip = self.skip.pop(draw, set())
        self.consumed[draw] = set(skip)
        for position in range(len(prompts)):
            if position in skip:
                continue
            lo = position * self.n
            samples = [Sample(ids[r][mask[r].bool()].tolist()) for r in range(lo, lo + self.n)]
            self.waiting.append(SampleGroup(draw, position, rows[lo : lo + self.n], samples))
        if not any(g.draw == draw for g in self.waiting):  # every group of it trained before a checkpoint
            self._close_draw(draw)

    def _call(self, groups: list[SampleGroup], samples: list[Sample]) -> Batch:
        """One generation call, seeded per call (at s = 0 call k is step k's generation, seeded as a synchronous
        step's): whole responses, or with partial rollouts one that returns early: once the groups the trainer
        still lacks are finished (all of them when it lacks none), when a sync interrupts it (engines that
        can stop mid-call: hf), or after ``partial_rollout_tokens`` (the others)."""
        self.calls += 1
        batch = generation_call(samples, self.pad_token_id)
        batch.meta = {"seed": rollout_seed(self.cfg.trainer.seed, self.calls, 0), "call": self.calls}
        if self.segmented:
            index = {id(g): i for i, g in enumerate(groups)}
            owner = {id(s): index[id(g)] for g in groups for s in g.samples}
            batch.tensors[GROUP_ID] = torch.tensor([owner[id(s)] for s in samples], dtype=torch.long)
            lacking = self.step_groups - len(self.ready)
            self.call_for_trainer = lacking > 0
            batch.meta["groups_wanted"] = lacking if lacking > 0 else len(groups)
            if not self.interruptible:
                batch.meta["max_new_tokens"] = min(self.segment_tokens, self.max_response_length)
        return batch

    def _interrupt(self) -> None:
        """A partial rollout's call in flight returns now (under ``cond``, while ``calling``)."""
        if self.segmented and self.interruptible and self.interrupted_call != self.calls:
            self.interrupted_call = self.calls
            self.rollout.interrupt(self.calls)

    def _take_outputs(self, samples: list[Sample], out: Batch, version: int) -> None:
        t = out.tensors
        lengths = t["response_mask"].sum(-1).tolist()
        stopped = out.non_tensors[STOPPED] if STOPPED in out.non_tensors else [True] * len(samples)
        for i, sample in enumerate(samples):
            n = int(lengths[i])
            sample.extend(
                t["responses"][i, :n].tolist(),
                t["rollout_log_probs"][i, :n].tolist(),
                version,
                bool(stopped[i]),
                self.max_response_length,
            )
        still = []
        for group in self.in_flight:
            if group.finished:
                self.ready.append(group)
                self.counts["total_generated_samples"] += self.n
            else:
                still.append(group)
        self.in_flight = still

    # -- bookkeeping (under ``cond``) ------------------------------------------------------------
    def _stale(self, group: SampleGroup) -> bool:
        return self.version - group.oldest_version() > self.max_lag

    def _drop_stale(self, groups: deque[SampleGroup] | list[SampleGroup]) -> bool:
        """Groups too far behind go back to the head of the queue, to be generated again from scratch."""
        stale = [g for g in groups if self._stale(g)]
        for group in stale:
            groups.remove(group)
            self.counts["dropped_stale_samples"] += self.n
            group.restart(self.version)
            self.waiting.appendleft(group)
            self.started -= 1
        if stale:
            logger.info(
                "Dropped %d group(s) more than %d version(s) stale; generating them again", len(stale), self.max_lag
            )
        return bool(stale)

    def _mark_consumed(self, group: SampleGroup) -> None:
        self.consumed.setdefault(group.draw, set()).add(group.position)
        if len(self.consumed[group.draw]) == self.step_groups:
            self._close_draw(group.draw)

    def _close_draw(self, draw: int) -> None:
        self.consumed.pop(draw, None)
        self.draw_state.pop(draw, None)

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error
