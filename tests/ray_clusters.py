"""The head node of a test's own local Ray cluster (``ray.cluster_utils.Cluster``): set up as a run's own
local cluster is (no idle workers prestarted), without the dashboard (~2 CPU-s to start, ~2% of a core
while up, measured 2026-12-07) and with a small object store."""

from __future__ import annotations

from typing import Any

from hybridrl.cluster.ray_cluster import NO_IDLE_PRESTART


def head_node_args(num_cpus: int, **extra: Any) -> dict[str, Any]:
    return {
        "num_cpus": num_cpus,
        "object_store_memory": 100 * 2**20,
        "include_dashboard": False,
        "_system_config": NO_IDLE_PRESTART,
        **extra,
    }
