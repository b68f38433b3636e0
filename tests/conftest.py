"""Fixtures shared by every test module."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

# Multi-rank launches (hybridrl.testing.launch.run_ranks) end their ranks past this and report every rank's
# stacks: under pytest-timeout's 600 s, so that a hang shows where each rank waits, not only the launcher.
os.environ.setdefault("HYBRIDRL_RANKS_TIMEOUT_S", "300")
from ray.cluster_utils import Cluster

from tests.ray_clusters import head_node_args


class _SharedCluster:
    """One local Ray cluster that the runs of a test session join by address.

    Ray (2.5x) cannot join a cluster again from a process that started and stopped a local cluster of its own
    since it last joined: the next job's actors are cancelled before they start ("The actor never ran"; seen
    as shared -> local -> shared in one process, while a new cluster joins fine). So every ``ray.init`` that
    starts a local cluster marks this one stale, and the next test that asks for it gets a new one."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.stale = False

    def address(self) -> str:
        if self.stale:
            self.close()
        if self.cluster is None:
            self.cluster = Cluster(
                initialize_head=True,
                head_node_args=head_node_args(os.cpu_count() or 1),
            )
        return self.cluster.address

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.shutdown()
            self.cluster = None
        self.stale = False

    def watching(self, init: Callable[..., Any]) -> Callable[..., Any]:
        def init_and_note_a_local_start(*args: Any, **kwargs: Any) -> Any:
            if (args[0] if args else kwargs.get("address")) in (None, "local"):
                self.stale = True
            return init(*args, **kwargs)

        return init_and_note_a_local_start


_SHARED = _SharedCluster()


@pytest.fixture(scope="session", autouse=True)
def _note_local_ray_starts() -> Iterator[None]:
    original = ray.init
    ray.init = _SHARED.watching(original)
    yield
    ray.init = original
    _SHARED.close()


@pytest.fixture(scope="session")
def shared_ray_cluster() -> _SharedCluster:
    """For fixtures wider than a test (a module's reference run): ``shared_ray_cluster.address()``."""
    return _SHARED


@pytest.fixture
def shared_ray() -> str:
    """The address of the session's local Ray cluster (one per xdist worker), for the runs whose point is not
    the cluster's own start or end: each joins it with ``trainer.ray.address`` instead of starting and
    stopping a cluster of its own (~5 CPU-seconds each on 2 cores). Sized as a run's own local cluster is on
    this machine (a CPU per core), so workers get the same torch threads."""
    return _SHARED.address()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Runs marked ``long`` first, the rest in their collected order (a stable sort: every xdist worker collects
    the same order). The vLLM tests' four 25-60 s runs came last in their collection and started when the other
    worker had nothing left to take (197 s where their sum is 330 s on 2 workers). Not the main suite's: its
    long runs first gave 833-851 s in fresh-clone CI runs and collection order 842 s, no difference beyond the
    noise, and an earlier try with every end-to-end run first took 969 s (two multi-process runs at once)."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
