"""Fully asynchronous training (verl's ``fully_async_policy`` recipe keys, with verl's meaning): generation runs
continuously on a rollout pool of its own while the actor trains, bounded by how stale a sample may be."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridrl.config.schema.fields import at_least, doc, positive


@dataclass(frozen=True)
class AsyncTrainingConfig:
    enable: bool = doc(
        False,
        "fully asynchronous training: the rollout pool (resource_pool.mapping.rollout) generates without waiting "
        "for the trainer; each step trains on require_batches x ppo_mini_batch_size prompts' groups as soon as "
        "they are finished (data.train_batch_size is set to that)",
    )
    staleness_threshold: float = doc(
        0.1,
        "verl's: between two weight syncs the generator starts at most (1 + this) x a sync window's groups "
        "(0 = synchronous); a sample whose first token is more than ceil(this) weight versions old when the "
        "trainer takes it is dropped and its prompt generated again",
    )
    trigger_parameter_sync_step: int = doc(
        4, "verl's: training steps between two weight syncs to the generation workers (a sync window)"
    )
    require_batches: int = doc(1, "verl's: PPO mini-batches (ppo_mini_batch_size prompts each) one step trains on")
    partial_rollout: bool = doc(
        True,
        "verl's: a weight sync interrupts the generation call in flight at its next token and its unfinished "
        "responses go on under the new weights; a call also returns once the groups a step lacks are finished "
        "(false: each call runs its responses to the end, and a sync waits for it)",
    )
    partial_rollout_tokens: int = doc(
        32,
        "with partial rollouts, for engines that cannot stop mid-call (vllm): tokens one call adds to each "
        "response before it returns (the hf engine is interrupted at the next token instead)",
    )
    use_rollout_log_probs: bool = doc(
        True,
        "verl's: the old log-probs are the generating engine's per-token ones (the behaviour policy's); false = "
        "a forward pass of the trainer's weights",
    )
    compute_prox_log_prob: bool = doc(
        False,
        "verl's: AReaL's decoupled PPO: the ratio is taken against a forward pass of the trainer's weights (the "
        "proximal policy) and each token weighted by min(pi_prox / pi_behaviour, "
        "algorithm.rollout_correction.rollout_is_threshold) (token level unless rollout_is says sequence)",
    )

    @property
    def max_version_lag(self) -> int:
        """The oldest first-token weight version a trained sample may have, in versions behind the trainer's."""
        return math.ceil(self.staleness_threshold)

    def problems(self, at: str) -> list[str]:
        problems = at_least(0, at, staleness_threshold=self.staleness_threshold)
        problems += positive(
            at,
            trigger_parameter_sync_step=self.trigger_parameter_sync_step,
            require_batches=self.require_batches,
            partial_rollout_tokens=self.partial_rollout_tokens,
        )
        return problems
