"""Resource pools: named sets of devices that roles are mapped onto (pure arithmetic; the cluster layer
realises each pool as a placement group).

The seed writes ``ResourcePoolManager(actor_rollout={"GPU": 4}, critic={"GPU": 2}, reward={"CPU": 16})``
with a role -> pool mapping; YAML writes the same under ``resource_pool.pools`` / ``.mapping``.
A pool with ``GPU: n`` has n workers with one GPU each. On a cluster without GPUs the same pool becomes
n CPU workers (one CPU each) with a logged notice, so one config runs on a laptop and on a cluster.
A pool with only ``CPU: n`` has ``workers`` workers (default 1) sharing the n CPUs. Any other key is a
custom resource label (e.g. ``gpu_group: 8``), split evenly over the bundles, so the pool lands only on
nodes that advertise it; ``strategy`` is the placement strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hybridrl.config.schema import ResourcePoolConfig

logger = logging.getLogger(__name__)

_KNOWN_KEYS = ("GPU", "CPU", "workers", "strategy")
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass(frozen=True)
class PoolSpec:
    """One pool as asked for: how many workers and what each worker's bundle reserves."""

    name: str
    num_workers: int
    gpus_per_worker: float
    cpus_per_worker: float
    custom: dict[str, float] = field(default_factory=dict)
    strategy: str = "PACK"  # Ray placement strategy of the pool's bundles

    @classmethod
    def from_resources(cls, name: str, resources: Mapping[str, Any]) -> PoolSpec:
        resources = dict(resources)
        strategy = str(resources.pop("strategy", "PACK")).upper()
        if strategy not in STRATEGIES:
            raise ValueError(f"Pool '{name}': strategy={strategy!r}; choose one of {', '.join(STRATEGIES)}.")
        try:
            res = {str(k): float(v) for k, v in resources.items()}
        except (TypeError, ValueError):
            raise ValueError(f"Pool '{name}': resource amounts must be numbers; got {resources}.") from None
        for key, value in res.items():
            if value < 0:
                raise ValueError(f"Pool '{name}': resource {key}={value} must not be negative.")
        gpus = res.get("GPU", 0.0)
        cpus = res.get("CPU", 0.0)
        custom = {k: v for k, v in res.items() if k not in _KNOWN_KEYS}
        if gpus:
            if gpus != int(gpus):
                raise ValueError(f"Pool '{name}': GPU={gpus} must be a whole number of devices.")
            workers = int(res.get("workers", gpus))
            if workers != int(gpus):
                raise ValueError(
                    f"Pool '{name}': a GPU pool has one worker per GPU; got GPU={int(gpus)} "
                    f"and workers={workers}. Remove 'workers' or make them equal."
                )
            per_cpu = max(1.0, cpus / workers) if cpus else 1.0
            return cls(name, workers, 1.0, per_cpu, {k: v / workers for k, v in custom.items()}, strategy)
        if not cpus:
            raise ValueError(
                f"Pool '{name}' asks for no GPU and no CPU ({dict(resources)}); give it e.g. {{GPU: 2}} or {{CPU: 4}}."
            )
        workers = int(res.get("workers", 1))
        if workers < 1:
            raise ValueError(f"Pool '{name}': workers={workers} must be at least 1.")
        return cls(name, workers, 0.0, cpus / workers, {k: v / workers for k, v in custom.items()}, strategy)

    def on_cpu_only_cluster(self, cpus_per_worker: float = 1.0) -> PoolSpec:
        """The same pool where no GPU exists: each GPU worker becomes a CPU worker with ``cpus_per_worker``
        CPUs (its torch threads), or the CPUs its pool asked for per worker if more."""
        if not self.gpus_per_worker:
            return self
        cpus = max(self.cpus_per_worker, cpus_per_worker)
        logger.warning(
            "No GPU in the cluster: pool '%s' runs its %d GPU workers as %d CPU workers of %g CPUs each.",
            self.name,
            self.num_workers,
            self.num_workers,
            cpus,
        )
        return PoolSpec(self.name, self.num_workers, 0.0, cpus, dict(self.custom), self.strategy)

    def bundles(self) -> list[dict[str, float]]:
        bundle: dict[str, float] = {"CPU": self.cpus_per_worker, **self.custom}
        if self.gpus_per_worker:
            bundle["GPU"] = self.gpus_per_worker
        return [dict(bundle) for _ in range(self.num_workers)]

    def total(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for bundle in self.bundles():
            for key, value in bundle.items():
                totals[key] = totals.get(key, 0.0) + value
        return totals


class ResourcePoolManager:
    """Pools by name plus the role -> pool mapping.

    Either ``ResourcePoolManager(pools={...}, mapping={...})`` or the seed's keyword form
    ``ResourcePoolManager(actor_rollout={"GPU": 4}, critic={"GPU": 2})`` where each keyword is a pool
    named after the role it serves.
    """

    def __init__(
        self,
        pools: Mapping[str, Mapping[str, Any]] | None = None,
        mapping: Mapping[str, str] | None = None,
        **role_pools: Mapping[str, Any],
    ) -> None:
        all_pools = dict(pools or {})
        for name, resources in role_pools.items():
            if name in all_pools:
                raise ValueError(f"Pool '{name}' is given twice.")
            all_pools[name] = resources
        self.mapping = dict(mapping or {name: name for name in role_pools})
        self.pools = {name: PoolSpec.from_resources(name, res) for name, res in all_pools.items()}
        for role, pool in self.mapping.items():
            if pool not in self.pools:
                raise ValueError(
                    f"Role '{role}' is mapped to pool '{pool}', which is not defined; "
                    f"defined pools: {sorted(self.pools)}."
                )

    def pool_of(self, role: str) -> PoolSpec:
        if role not in self.mapping:
            raise KeyError(f"Role '{role}' has no pool; mapping: {self.mapping}.")
        return self.pools[self.mapping[role]]

    def roles_of(self, pool: str) -> list[str]:
        return [role for role, name in self.mapping.items() if name == pool]

    def used_pools(self) -> list[PoolSpec]:
        names = list(dict.fromkeys(self.mapping.values()))
        return [self.pools[name] for name in names]

    def for_cluster(self, cluster_gpus: float, cluster_cpus: float = 1.0) -> ResourcePoolManager:
        """Adapt the pools to the cluster: GPU pools become CPU pools when it has no GPU, their workers
        sharing the cluster's CPUs evenly (one worker on a 2-core machine gets both cores' threads; roles
        colocated on a worker run one after another in its process and share them)."""
        if cluster_gpus > 0:
            return self
        workers = sum(spec.num_workers for spec in self.used_pools())
        share = max(1.0, float(int(cluster_cpus // max(workers, 1))))
        adapted = ResourcePoolManager.__new__(ResourcePoolManager)
        adapted.mapping = dict(self.mapping)
        adapted.pools = {
            name: (spec.on_cpu_only_cluster(share) if name in self.mapping.values() else spec)
            for name, spec in self.pools.items()
        }
        return adapted

    def total(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for spec in self.used_pools():
            for key, value in spec.total().items():
                totals[key] = totals.get(key, 0.0) + value
        return totals

    @classmethod
    def from_config(cls, cfg: ResourcePoolConfig, roles: list[str] | None = None) -> ResourcePoolManager:
        """Pools from ``resource_pool``; with ``roles``, only those roles are mapped (and reserved)."""
        mapping = dict(cfg.mapping)
        if roles is not None:
            mapping = {role: pool for role, pool in mapping.items() if role in roles}
        return cls(pools=cfg.pools, mapping=mapping)
