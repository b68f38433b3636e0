"""Fixtures shared by every test module."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from ray.cluster_utils import Cluster


@pytest.fixture(scope="session")
def shared_ray() -> Iterator[str]:
    """The address of one local Ray cluster for the whole session (one per xdist worker), for the runs
    whose point is not the cluster's own start or end: each joins it with ``trainer.ray.address`` instead
    of starting and stopping a cluster of its own (~5 CPU-seconds each on 2 cores). Sized as a run's own
    local cluster is on this machine (a CPU per core), so workers get the same torch threads."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": os.cpu_count() or 1,
            "object_store_memory": 100 * 2**20,
            "include_dashboard": False,
        },
    )
    yield cluster.address
    cluster.shutdown()
