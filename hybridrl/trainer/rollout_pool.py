"""The driver's side of a rollout pool of its own (``resource_pool.mapping.rollout``): the weight channel
from the actor's first rank to the generation workers, one hand-over per weight change, and with
``rollout.overlap`` the next step's generation started before this step trains.

One step off-policy, as verl's one_step_off recipe and OpenRLHF's async mode: step k's rollouts were
generated while step k-1 trained, so by the weights after step k-2's update; the trainer takes the
generation engine's log-probs as the old log-probs (the behaviour policy's, ``trainer.old_log_probs``).
The step time drops from gen + train to about max(gen, train) plus the hand-over.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hybridrl.cluster.role_clients import ActorRolloutClient, RolloutClient
from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)


class SeparateRollout:
    def __init__(self, actor: ActorRolloutClient, rollout: RolloutClient, timeout_s: float) -> None:
        """Opens the weight channel: the actor's first rank hosts it, every rollout worker joins."""
        self.actor, self.rollout = actor, rollout
        address, port = actor.group.host_store()
        size = 1 + rollout.group.world_size
        # Both sides at once: the hosting rank waits in its constructor until every other rank connected.
        opening = [
            actor.open_weight_channel(address, port, size, timeout_s),
            rollout.open_weight_channel(address, port, size, timeout_s),
        ]
        for wait in opening:
            wait()
        logger.info("Weight channel open: the actor's first rank -> %d rollout workers", rollout.group.world_size)

    def hand_over(self) -> bool:
        """The actor's weights to the rollout workers; True if they were new (the actor's workers decide,
        ``generation.weight_sync``: unchanged weights go as an empty stream). The receivers take the call
        after any generation they are running, so the actor waits for that."""
        sending, receiving = self.actor.send_weights(), self.rollout.receive_weights()
        sending()
        return any(receiving())


@dataclass
class Prefetched:
    """A step's generation started during the previous step (``rollout.overlap``)."""

    step: int
    prompts: Batch
    batch: Batch  # the rows without their generation inputs; the responses join it
    responses: Callable[[], Batch]
    sampler_state: dict[str, Any]  # the data position before this step's prompts were drawn
