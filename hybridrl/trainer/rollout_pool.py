"""The driver's side of a rollout pool of its own (``resource_pool.mapping.rollout``): the weight channel
from the actor's sending ranks to the generation workers, one hand-over per weight change, and with
``rollout.overlap`` the next step's generation started before this step trains.

One step off-policy, as verl's one_step_off recipe and OpenRLHF's async mode: step k's rollouts were
generated while step k-1 trained, so by the weights after step k-2's update; the trainer takes the
generation engine's log-probs as the old log-probs (the behaviour policy's, ``trainer.old_log_probs``).
The step time drops from gen + train to about max(gen, train) plus the hand-over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hybridrl.cluster.errors import system_failure
from hybridrl.cluster.role_clients import ActorRolloutClient, RolloutClient
from hybridrl.config.schema import RolloutConfig
from hybridrl.generation.weight_channel import ChannelPlan
from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HandOver:
    """One hand-over to the rollout pool: whether the weights were new, the bytes the senders sent, and the
    seconds from the first send to the last receiver's load."""

    new: bool
    bytes: int
    seconds: float

    def metrics(self) -> dict[str, float]:
        """``weight_sync/*``: what moved and how fast (only where weights moved)."""
        if not self.new:
            return {}
        return {
            "weight_sync/mb": self.bytes / 2**20,
            "weight_sync/gb_per_s": self.bytes / 1e9 / max(self.seconds, 1e-9),
        }


class SeparateRollout:
    def __init__(self, actor: ActorRolloutClient, rollout: RolloutClient, cfg: RolloutConfig, timeout_s: float) -> None:
        """Opens the weight channel: the actor's first rank hosts its store, the actor's sending ranks
        (``rollout.weight_senders``) and every rollout worker join."""
        self.actor, self.rollout = actor, rollout
        address, port = actor.group.host_store()
        senders = min(cfg.weight_senders or actor.group.world_size, actor.group.world_size)
        plan = ChannelPlan(
            address,
            port,
            senders=senders,
            receivers=rollout.group.world_size,
            bucket_bytes=cfg.update_weights_bucket_megabytes * 2**20,
            timeout_s=timeout_s,
        )
        # Both sides at once: every group's constructor waits until all its members connected.
        opening = [actor.open_weight_channel(plan), rollout.open_weight_channel(plan)]
        for wait in opening:
            wait()
        logger.info(
            "Weight channel open: %d actor rank(s) -> %d rollout workers, buckets of %d MB",
            senders,
            rollout.group.world_size,
            cfg.update_weights_bucket_megabytes,
        )

    def hand_over(self) -> HandOver:
        """The actor's weights to the rollout workers (the actor's workers decide whether they are new,
        ``generation.weight_sync``: unchanged weights go as empty streams). The receivers take the call
        after any generation they are running, so the actor waits for that."""
        started = time.perf_counter()
        sending, receiving = self.actor.send_weights(), self.rollout.receive_weights()
        try:
            sent = sum(sending())
        except Exception as exc:
            # A dead receiver closes the channel under the senders: its own death is the cause to report
            # (a system failure, which trainer.max_restarts recovers), not the senders' broken connection.
            try:
                receiving()
            except Exception as cause:
                if system_failure(cause):
                    raise cause from exc
            raise
        new = any(receiving())
        return HandOver(new, sent, time.perf_counter() - started)


@dataclass
class Prefetched:
    """A step's generation started during the previous step (``rollout.overlap``)."""

    step: int
    prompts: Batch
    batch: Batch  # the rows without their generation inputs; the responses join it
    responses: Callable[[], Batch]
    sampler_state: dict[str, Any]  # the data position before this step's prompts were drawn
