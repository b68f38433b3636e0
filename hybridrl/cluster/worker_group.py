"""A WorkerGroup: the Ray actors of one pool, one torch.distributed group, and group calls.

Started as OpenRLHF does: a placement group reserves one bundle per rank, rank 0 starts first and
reports a rendezvous address, then every rank joins the process group. Group calls split a batch over
the data-parallel ranks and gather the results; every wait has a timeout and names the failing rank.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.experimental import get_object_locations
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hybridrl.cluster.errors import PoolPlacementError, WorkerCallError, WorkerCallTimeout, WorkerStuckError
from hybridrl.cluster.liveness import Liveness
from hybridrl.cluster.pools import PoolSpec
from hybridrl.config.schema import Config
from hybridrl.engine.context import DataLayout
from hybridrl.observability.tracing import CallResult
from hybridrl.protocol import Batch
from hybridrl.workers.worker import CONTROL, Worker

logger = logging.getLogger(__name__)

_SIZE_LOOKUP_TIMEOUT_MS = 10_000  # the objects are ours (the driver owns them): answered locally
_DEATH_GRACE_S = 5.0  # after a rank raised: how long to look for a peer that died (the real cause)


def _cause(exc: Exception) -> str:
    inner = getattr(exc, "cause", None)
    return str(inner) if inner is not None else str(exc).splitlines()[-1]


def _stored_bytes(refs: list[Any]) -> int:
    """Serialized bytes (data + metadata) that Ray reports for these objects, each object counted once.

    Ray's own figure, so views, pickling overhead and shared objects count as they really travel. An
    object on several nodes is still counted once. Unknown sizes (a lookup past its timeout) count 0:
    this is a metric, and must not fail a step.
    """
    try:
        found = get_object_locations(list(dict.fromkeys(refs)), timeout_ms=_SIZE_LOOKUP_TIMEOUT_MS)
    except GetTimeoutError:
        logger.debug("Object size lookup timed out; ray/transfer_mb undercounts this call")
        return 0
    return sum(int(info.get("object_size") or 0) for info in found.values())


class WorkerGroup:
    def __init__(
        self,
        pool: PoolSpec,
        roles: list[str],
        cfg: Config,
        model_path: str,
        tokenizer_path: str,
        start_timeout_s: float,
        call_timeout_s: float,
        monitor: Any | None = None,
        liveness_timeout_s: float = 0.0,
    ) -> None:
        self.pool = pool
        self.roles = list(roles)
        self.name = "+".join(self.roles)
        self.call_timeout_s = call_timeout_s
        self.monitor = monitor  # a RunMonitor: timeline, stragglers, resources (optional)
        self.liveness_timeout_s = max(0.0, liveness_timeout_s)  # 0: no liveness questions, whole-call timeouts
        self.liveness: Liveness | None = None
        self.failed = False  # a rank died or stopped answering: shutdown does not wait on it
        self.actors: list[Any] = []
        self._layouts: dict[tuple[str, str], list[DataLayout]] = {}
        self.placement_group = placement_group(pool.bundles(), strategy=pool.strategy, name=f"hybridrl-{pool.name}")
        try:
            ready, _ = ray.wait([self.placement_group.ready()], timeout=start_timeout_s)
            if not ready:
                raise PoolPlacementError(
                    f"Pool '{pool.name}' (roles {self.roles}) asked for {pool.num_workers} bundles of "
                    f"{pool.bundles()[0]} = {pool.total()} but the cluster could not place them within "
                    f"{start_timeout_s:.0f} s (trainer.ray.start_timeout_s). Cluster has "
                    f"{ {k: v for k, v in ray.available_resources().items() if not k.startswith('node:')} } "
                    f"available. Shrink the pool or add nodes."
                )
            bundle = pool.bundles()[0]
            # One extra thread per worker for the calls that run beside its current one (``CONTROL``).
            remote_worker = ray.remote(concurrency_groups={CONTROL: 1})(Worker)  # type: ignore[call-overload]
            for rank in range(pool.num_workers):
                options = dict(
                    num_cpus=bundle.get("CPU", 0),
                    num_gpus=bundle.get("GPU", 0),
                    resources={k: v for k, v in bundle.items() if k not in ("CPU", "GPU")} or None,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self.placement_group, placement_group_bundle_index=rank
                    ),
                    name=None,
                    max_restarts=0,
                )
                self.actors.append(
                    remote_worker.options(**options).remote(
                        rank,
                        pool.num_workers,
                        self.roles,
                        cfg,
                        model_path,
                        tokenizer_path,
                        num_threads=max(1, int(bundle.get("CPU", 1))),
                    )
                )
            if self.liveness_timeout_s > 0:
                self.liveness = Liveness(self.actors, self.liveness_timeout_s)
            master_addr, master_port = self._wait([self.actors[0].host_store.remote()], "host_store", start_timeout_s)[
                0
            ]
            self.node_info = self._wait([a.node_info.remote() for a in self.actors], "node_info", start_timeout_s)
            nodes = [info.get("node_id") or info["ip"] for info in self.node_info]
            self._wait(
                [
                    a.setup.remote(master_addr, master_port, call_timeout_s, nodes.count(nodes[rank]))
                    for rank, a in enumerate(self.actors)
                ],
                "setup",
                start_timeout_s,
            )
        except BaseException:
            self.shutdown()
            raise
        logger.info(
            "Worker group %s: %d workers on pool '%s' (%s each)", self.name, pool.num_workers, pool.name, bundle
        )

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def _wait(self, refs: list[Any], method: str, timeout_s: float | None = None) -> list[Any]:
        """Gather results in rank order; fail on the first rank that raises, dies or stops answering, or on
        the timeout.

        With liveness questions a call has no whole-call deadline unless ``timeout_s`` is given (start-up): a
        70B generate may take longer than any fixed bound, while a stopped rank is named by its silence and a
        collective that never completes fails on the workers after the process group's timeout
        (``call_timeout_s``).
        """
        unbounded = timeout_s is None and self.liveness is not None
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        deadline = math.inf if unbounded else started + timeout_s
        index = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        self._check_liveness(method)
        while pending:
            wait_s = min(max(0.0, deadline - time.monotonic()), self.liveness_timeout_s / 3 or math.inf)
            ready, pending = ray.wait(pending, num_returns=1, timeout=None if wait_s == math.inf else wait_s)
            if not ready:
                if time.monotonic() >= deadline:
                    self.failed = True
                    raise WorkerCallTimeout(self.name, sorted(index[r] for r in pending), method, timeout_s)
                self._check_liveness(method)
                continue
            try:
                ray.get(ready[0], timeout=0)
            except RayActorError as exc:  # the process or its node is gone
                self.failed = True
                raise WorkerCallError(self.name, index[ready[0]], method, _cause(exc), system=True) from exc
            except RayTaskError as exc:
                # A rank that died makes its peers' collectives fail too, and their errors can come first:
                # name the dead rank, which is the cause.
                dead = self._dead_rank(pending, index, method)
                if dead is not None:
                    raise dead from exc
                raise WorkerCallError(self.name, index[ready[0]], method, _cause(exc)) from exc
            except GetTimeoutError:  # pragma: no cover - ready refs do not time out
                raise WorkerCallTimeout(self.name, [index[ready[0]]], method, timeout_s) from None
        return ray.get(refs)

    def _check_liveness(self, method: str) -> None:
        """Ask the ranks that are due whether they run; raise WorkerStuckError naming those that stopped
        answering."""
        if self.liveness is None:
            return
        silent = self.liveness.silent()
        if silent:
            self.failed = True
            raise WorkerStuckError(self.name, sorted(silent), method, max(silent.values()))

    def _dead_rank(self, pending: list[Any], index: dict[Any, int], method: str) -> WorkerCallError | None:
        """After one rank raised: a rank among ``pending`` whose process died, within a short grace."""
        if not pending:
            return None
        done, _ = ray.wait(pending, num_returns=len(pending), timeout=_DEATH_GRACE_S)
        for ref in done:
            try:
                ray.get(ref, timeout=0)
            except RayActorError as exc:
                self.failed = True
                return WorkerCallError(self.name, index[ref], method, _cause(exc), system=True)
            except Exception:  # peers' own errors: the first one is reported
                continue
        return None

    def _gather(self, refs: list[Any], name: str, sent: list[Any] | None = None) -> list[CallResult]:
        """Wait for ``refs``; the monitor counts the bytes of the ``sent`` objects and of the results."""
        results = self._wait(refs, name)
        if self.monitor is not None:
            self.monitor.on_call(self.name, name, results, _stored_bytes([*(sent or []), *refs]))
        for result in results:  # batches come back compact, ids and masks narrow (``Batch.compact``)
            if isinstance(result.value, Batch):
                result.value = result.value.widened()
        return results

    def call_all(self, role: str, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Run ``role.method(*args)`` on every rank and return the per-rank values."""
        return self.submit_all(role, method, *args, **kwargs)()

    def submit_all(self, role: str, method: str, *args: Any, **kwargs: Any) -> Callable[[], list[Any]]:
        """``call_all`` started now; the returned function waits for its per-rank values."""
        refs = [a.call.remote(role, method, *args, **kwargs) for a in self.actors]
        return lambda: [r.value for r in self._gather(refs, f"{role}.{method}")]

    def interrupt_generation(self, call: int) -> None:
        """Ask every rank to stop generation call ``call`` at its next token; not waited for (the call itself
        returns what it generated so far)."""
        for actor in self.actors:
            actor.interrupt_generation.remote(call)

    def host_store(self) -> tuple[str, int]:
        """The address of a store the first rank now hosts (for a channel that rank opens)."""
        return tuple(self._wait([self.actors[0].host_store.remote()], "host_store")[0])

    def execute_all(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """Run ``fn(worker, *args)`` on every rank (diagnostics); returns the per-rank values."""
        refs = [a.execute.remote(fn, *args) for a in self.actors]
        return [r.value for r in self._gather(refs, getattr(fn, "__name__", "execute"))]

    def save_checkpoint(self, directory: str) -> None:
        self._gather([a.save_checkpoint.remote(directory) for a in self.actors], "save_checkpoint")

    def load_checkpoint(self, directory: str) -> None:
        self._gather([a.load_checkpoint.remote(directory) for a in self.actors], "load_checkpoint")

    def dp_layout(self, role: str, method: str) -> list[DataLayout]:
        """Per rank: its data-parallel replica for ``role.method``. Ranks of one replica (tensor-parallel
        peers, pipeline stages) get the same rows; one rank per replica reports back."""
        key = (role, method)
        if key not in self._layouts:
            layout = [
                DataLayout(*v)
                for v in self._wait([a.dp_layout.remote(role, method) for a in self.actors], f"{role}.dp_layout")
            ]
            replicas = {rank.replicas for rank in layout}
            gathered = sorted(rank.replica for rank in layout if rank.collects)
            if len(replicas) != 1 or gathered != list(range(layout[0].replicas)):
                raise RuntimeError(f"{self.name}: inconsistent data-parallel layout for {role}.{method}: {layout}.")
            self._layouts[key] = layout
        return self._layouts[key]

    def call_split(self, role: str, method: str, batch: Batch) -> list[CallResult]:
        """Give each data-parallel replica its equal shard of ``batch``; return one result per replica, in
        replica order (from the replica's reporting rank).

        Each shard is compacted (a view would ship the whole batch) and put once: the peers of a replica
        (tensor-parallel ranks, pipeline stages) get the same object ref, where passing the batch by value
        would serialise it once per rank.
        """
        return self.submit_split(role, method, batch)()

    def submit_split(self, role: str, method: str, batch: Batch) -> Callable[[], list[CallResult]]:
        """``call_split`` started now; the returned function waits for its results (so the driver can
        work, or other groups compute, meanwhile: ``rollout.overlap``)."""
        layout = self.dp_layout(role, method)
        return self._submit_shards(
            layout, f"{role}.{method}", batch, lambda a, shard: a.call.remote(role, method, shard)
        )

    def submit_dp_each(
        self, calls: list[tuple[str, str]], batch: Batch
    ) -> Callable[[], tuple[Batch, list[CallResult]]]:
        """``call_dp`` of several colocated roles' passes over the same rows, as one call per rank
        (``Worker.call_each``); they must share one data-parallel layout (``same_layout``)."""
        assert self.same_layout(calls), f"{self.name}: {calls} do not share one data-parallel layout"
        name = "+".join(f"{role}.{method}" for role, method in calls)
        return self._submit_rows(
            self.dp_layout(*calls[0]), name, batch, lambda a, shard: a.call_each.remote(calls, shard)
        )

    def same_layout(self, calls: list[tuple[str, str]]) -> bool:
        """Whether ``role.method`` of every call gives each rank the same rows."""
        return all(self.dp_layout(*call) == self.dp_layout(*calls[0]) for call in calls)

    def _submit_shards(
        self, layout: list[DataLayout], name: str, batch: Batch, invoke: Callable[[Any, Any], Any]
    ) -> Callable[[], list[CallResult]]:
        shards = [ray.put(shard.compact()) for shard in batch.split(layout[0].replicas)]
        refs = [invoke(a, shards[rank.replica]) for a, rank in zip(self.actors, layout)]

        def result() -> list[CallResult]:
            results = self._gather(refs, name, shards)
            collected = sorted(
                ((rank.replica, r) for r, rank in zip(results, layout) if rank.collects), key=lambda pair: pair[0]
            )
            return [r for _, r in collected]

        return result

    def call_dp(self, role: str, method: str, batch: Batch) -> tuple[Batch, list[CallResult]]:
        """Split ``batch`` over the data-parallel replicas, run ``role.method`` on each shard, gather the
        rows in order.

        Also returns the per-replica call results (their spans and resources; values are the shards).
        """
        return self.submit_dp(role, method, batch)()

    def submit_dp(self, role: str, method: str, batch: Batch) -> Callable[[], tuple[Batch, list[CallResult]]]:
        """``call_dp`` started now; the returned function waits for the gathered rows."""
        return self._submit_rows(
            self.dp_layout(role, method), f"{role}.{method}", batch, lambda a, shard: a.call.remote(role, method, shard)
        )

    def _submit_rows(
        self, layout: list[DataLayout], name: str, batch: Batch, invoke: Callable[[Any, Any], Any]
    ) -> Callable[[], tuple[Batch, list[CallResult]]]:
        """``batch`` padded to a multiple of the replicas and split over them; the waiter gathers the rows
        back in order, without the padding."""
        padded, pad = batch.pad_to_divisor(layout[0].replicas)
        pending = self._submit_shards(layout, name, padded, invoke)

        def result() -> tuple[Batch, list[CallResult]]:
            results = pending()
            return Batch.concat([r.value for r in results]).unpad(pad), results

        return result

    def shutdown(self) -> None:
        if self.actors:
            # Leave the gloo/nccl group cleanly; a stuck rank must not block shutdown. Best effort: the
            # actors are killed next. After a rank died or stopped there is no clean exit to wait for.
            if not self.failed:
                with contextlib.suppress(Exception):
                    ray.wait([a.teardown.remote() for a in self.actors], num_returns=len(self.actors), timeout=30)
            for actor in self.actors:
                ray.kill(actor, no_restart=True)
            self.actors = []
        if self.placement_group is not None:
            remove_placement_group(self.placement_group)
            self.placement_group = None
        self.liveness = None
