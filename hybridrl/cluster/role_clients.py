"""Typed clients the driver calls roles through: one class per role, each method declaring its dispatch once.

Dispatch modes (``WorkerGroup``):
- ``dp``: split the batch over the role's data-parallel replicas, gather the rows back in order (padding
  the batch to a multiple of the replicas first): forward passes and generation, returning a ``Batch``.
- ``split``: each replica gets its equal shard and returns a value (per-replica metrics of an update).
- ``all``: every rank runs the call with the same arguments (export, diagnostics).

The method names sent to the workers are taken from the role classes themselves, so renaming a role
method breaks here, at import, not mid-run. Each call's per-rank results (spans, resources) stay in
``last_results`` for the monitor's sub-span timings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.generation.weight_channel import ChannelPlan
from hybridrl.observability.tracing import CallResult
from hybridrl.protocol import Batch
from hybridrl.workers.actor_rollout import ActorRolloutRole
from hybridrl.workers.critic import CriticRole
from hybridrl.workers.ref import RefRole
from hybridrl.workers.reward_model import RewardModelRole
from hybridrl.workers.rollout import RolloutRole


class RoleClient:
    """One role on its worker group."""

    role: str = ""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group
        self.last_results: list[CallResult] = []

    def _dp(self, method: Callable[..., Any], batch: Batch) -> Batch:
        out, self.last_results = self.group.call_dp(self.role, method.__name__, batch)
        return out

    def _split(self, method: Callable[..., Any], batch: Batch) -> list[Any]:
        self.last_results = self.group.call_split(self.role, method.__name__, batch)
        return [r.value for r in self.last_results]

    def _all(self, method: Callable[..., Any], *args: Any) -> list[Any]:
        return self.group.call_all(self.role, method.__name__, *args)


class ActorRolloutClient(RoleClient):
    role = "actor_rollout"

    def generate(self, batch: Batch) -> Batch:
        """Responses for the prompts of ``batch`` (``meta``: ``seed``, optional ``sampling``)."""
        return self._dp(ActorRolloutRole.generate, batch)

    def compute_log_prob(self, batch: Batch) -> Batch:
        """``old_log_probs`` and ``old_entropy`` of the responses under the current policy."""
        return self._dp(ActorRolloutRole.compute_log_prob, batch)

    def log_prob_pass(self) -> ForwardPass:
        """``compute_log_prob`` as a step's forward pass (``run_forward_passes``)."""
        return ForwardPass("old_log_prob", self, ActorRolloutRole.compute_log_prob)

    def ref_pass(self) -> ForwardPass:
        """The reference log-probs from the actor's base model, adapters off (LoRA: ``ref_in_actor``)."""
        return ForwardPass("ref", self, ActorRolloutRole.compute_ref_log_prob)

    def rollout_log_probs_exact(self) -> list[bool]:
        """Per rank: whether its generation engine's log-probs are the trainer's up to float rounding."""
        return self._all(ActorRolloutRole.rollout_log_probs_exact)

    def train_replicas(self) -> int:
        """The data-parallel replicas the actor trains on (each gets an equal, contiguous share of rows)."""
        return self.group.dp_layout(self.role, ActorRolloutRole.update_actor.__name__)[0].replicas

    def update_actor(self, batch: Batch) -> list[dict[str, float]]:
        """One PPO update on the batch; each replica's metrics."""
        return self._split(ActorRolloutRole.update_actor, batch)

    def save_hf(self, out_dir: str, max_shard_bytes: int) -> list[str | None]:
        return self._all(ActorRolloutRole.save_hf, out_dir, max_shard_bytes)

    def state_digest(self) -> list[dict[str, str]]:
        return self._all(ActorRolloutRole.state_digest)

    def open_weight_channel(self, plan: ChannelPlan) -> Callable[[], list[Any]]:
        return self.group.submit_all(self.role, ActorRolloutRole.open_weight_channel.__name__, plan)

    def send_weights(self) -> Callable[[], list[Any]]:
        """Started now: every rank gathers the weights, the sending ranks send them to the rollout workers."""
        return self.group.submit_all(self.role, ActorRolloutRole.send_weights.__name__)


class RolloutClient(RoleClient):
    """Generation-only workers on a pool of their own."""

    role = "rollout"

    def generate(self, batch: Batch) -> Batch:
        return self.submit_generate(batch)()

    def submit_generate(self, batch: Batch) -> Callable[[], Batch]:
        """Generation started now; the returned function waits for the responses (``rollout.overlap``)."""
        pending = self.group.submit_dp(self.role, RolloutRole.generate.__name__, batch)

        def result() -> Batch:
            out, self.last_results = pending()
            return out

        return result

    def interrupt(self, call: int) -> None:
        """Stop generation call ``call`` (``meta["call"]``) at its next token on every worker."""
        self.group.interrupt_generation(call)

    def open_weight_channel(self, plan: ChannelPlan) -> Callable[[], list[Any]]:
        return self.group.submit_all(self.role, RolloutRole.open_weight_channel.__name__, plan)

    def receive_weights(self) -> Callable[[], list[Any]]:
        return self.group.submit_all(self.role, RolloutRole.receive_weights.__name__)

    def state_digest(self) -> list[dict[str, str]]:
        return self._all(RolloutRole.state_digest)


class CriticClient(RoleClient):
    role = "critic"

    def compute_values(self, batch: Batch) -> Batch:
        return self._dp(CriticRole.compute_values, batch)

    def values_pass(self) -> ForwardPass:
        return ForwardPass("values", self, CriticRole.compute_values)

    def update_critic(self, batch: Batch) -> list[dict[str, float]]:
        return self._split(CriticRole.update_critic, batch)

    def state_digest(self) -> list[dict[str, str]]:
        return self._all(CriticRole.state_digest)


class RefClient(RoleClient):
    role = "ref"

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self._dp(RefRole.compute_ref_log_prob, batch)

    def ref_pass(self) -> ForwardPass:
        return ForwardPass("ref", self, RefRole.compute_ref_log_prob)


class RewardModelClient(RoleClient):
    role = "reward_model"

    def compute_rm_score(self, batch: Batch) -> Batch:
        return self._dp(RewardModelRole.compute_rm_score, batch)


@dataclass(frozen=True)
class ForwardPass:
    """One of a step's forward passes over the rollouts (old log-probs, reference log-probs, values)."""

    phase: str  # its timer: ``timing_s/<phase>``
    client: RoleClient
    method: Callable[..., Batch | None]  # the role's method, e.g. ``RefRole.compute_ref_log_prob``

    @property
    def call(self) -> tuple[str, str]:
        return self.client.role, self.method.__name__


def colocated_passes(passes: list[ForwardPass]) -> list[list[ForwardPass]]:
    """``passes`` in order, consecutive ones hosted by the same workers with one data-parallel layout put
    together: each list goes out as one call (``run_forward_passes``)."""
    together: list[list[ForwardPass]] = []
    for p in passes:
        last = together[-1] if together else None
        if last and last[0].client.group is p.client.group and p.client.group.same_layout([q.call for q in [*last, p]]):
            last.append(p)
        else:
            together.append([p])
    return together


def run_forward_passes(passes: list[ForwardPass], batch: Batch) -> tuple[Batch, dict[str, float]]:
    """The passes (one worker group) as one call per rank: the rows go out once, every pass's outputs
    come back as one batch. Also each pass's seconds on the slowest rank (dispatch excluded): one rank's
    split, so the phases add up to no more than the call (each pass's own slowest rank may differ)."""
    group = passes[0].client.group
    out, results = group.submit_dp_each([p.call for p in passes], batch)()
    names = {p.phase: f"{p.call[0]}.{p.call[1]}" for p in passes}
    per_rank = [
        {phase: sum(s.end - s.start for s in r.sub_spans if s.name == name) for phase, name in names.items()}
        for r in results
    ]
    slowest = max(per_rank, key=lambda split: sum(split.values()), default={phase: 0.0 for phase in names})
    return out, slowest


@dataclass(frozen=True)
class RoleClients:
    """The driver's handles on every role of the run, typed; a role the config does not need is None."""

    actor_rollout: ActorRolloutClient
    critic: CriticClient | None = None
    ref: RefClient | None = None
    reward_model: RewardModelClient | None = None
    rollout: RolloutClient | None = None  # generation workers of their own (``resource_pool.mapping.rollout``)

    def groups(self) -> list[WorkerGroup]:
        """Each worker group once (colocated roles share one)."""
        clients = [self.actor_rollout, self.critic, self.ref, self.reward_model, self.rollout]
        return list({id(c.group): c.group for c in clients if c is not None}.values())


def make_clients(groups: list[WorkerGroup]) -> RoleClients:
    """One client per role the groups host, on the group that hosts it."""
    group_of = {role: group for group in groups for role in group.roles}
    critic, ref, rm, rollout = (group_of.get(role) for role in ("critic", "ref", "reward_model", "rollout"))
    return RoleClients(
        actor_rollout=ActorRolloutClient(group_of["actor_rollout"]),
        critic=CriticClient(critic) if critic is not None else None,
        ref=RefClient(ref) if ref is not None else None,
        reward_model=RewardModelClient(rm) if rm is not None else None,
        rollout=RolloutClient(rollout) if rollout is not None else None,
    )
