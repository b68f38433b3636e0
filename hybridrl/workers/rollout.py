"""The Rollout role: generation-only workers on a pool of their own (``resource_pool.mapping.rollout``).

The actor's workers then only train; after each update the actor's first rank streams the new weights to
these workers over a weight channel (``generation.weight_channel``). With ``rollout.overlap`` the driver
has them generate the next step's rollouts while the actor trains on this step's (one step off-policy).
"""

from __future__ import annotations

from hybridrl.config.schema import Config
from hybridrl.engine.context import DataLayout, WorkerContext
from hybridrl.engine.dtypes import rollout_dtype
from hybridrl.generation.generation import Generation, open_channel
from hybridrl.generation.weight_channel import ChannelPlan
from hybridrl.generation.weight_sync import WeightReceiver
from hybridrl.protocol import Batch


class RolloutRole:
    def __init__(self, cfg: Config, ctx: WorkerContext) -> None:
        arr = cfg.actor_rollout_ref
        self.ctx = ctx
        self.generation = Generation(
            arr.model,
            arr.rollout,
            ctx,
            dtype=rollout_dtype(arr.rollout.dtype, arr.actor.precision, ctx.device),
            max_prompt_length=cfg.data.max_prompt_length,
            max_response_length=cfg.data.max_response_length,
            seed=cfg.trainer.seed,
        )
        self.weights = WeightReceiver(self.generation.engine, ctx.recorder.span)

    @classmethod
    def from_config(cls, cfg: Config, ctx: WorkerContext) -> RolloutRole:
        return cls(cfg, ctx)

    def dp_layout(self, method: str) -> DataLayout:
        return self.generation.layout()

    def open_weight_channel(self, plan: ChannelPlan) -> None:
        """Join the channel after the actor's sending ranks (``plan.senders + rank``)."""
        self.weights.open(open_channel(self.ctx, plan, plan.senders + self.ctx.rank))

    def receive_weights(self) -> bool:
        """Load the weights the actor's sending ranks are sending (``ActorRolloutRole.send_weights``); False
        when it said these workers hold them already."""
        return self.weights.receive()

    def generate(self, batch: Batch) -> Batch:
        if not self.weights.has_weights:
            raise RuntimeError("The rollout workers have no weights yet: the actor hands them over first.")
        self.generation.engine.resume()
        try:
            return self.generation.generate(batch)
        finally:
            self.generation.engine.release()

    def interrupt(self, call: int) -> None:
        """Stop generation call ``call`` at its next token (called beside it: ``Worker.interrupt_generation``)."""
        self.generation.interrupt(call)

    def state_digest(self) -> dict[str, str]:
        return {"rollout": self.generation.engine.weights_digest()}
