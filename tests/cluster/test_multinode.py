"""A real multi-node Ray cluster on one machine: pools land on the node groups their labels name."""

from __future__ import annotations

import json
import time

import pytest

from hybridrl.cluster.errors import PoolPlacementError
from hybridrl.config.loader import load_config
from hybridrl.trainer.job import run

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SMALL = [
    "trainer.total_steps=2",
    "trainer.progress_bar=false",
    "trainer.save_hf=false",
    "trainer.logger=[jsonl]",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "algorithm.adv_estimator=gae",  # a critic, on its own node group
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "critic.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "critic.ppo_micro_batch_size_per_gpu=16",
]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    from tests.ray_clusters import head_node_args

    # A head and two worker nodes, each its own raylet, each advertising different custom resources.
    c = Cluster(
        initialize_head=True,
        head_node_args=head_node_args(1, resources={"head": 1}),
    )
    actor_node = c.add_node(num_cpus=2, resources={"worker": 1, "actor_group": 2}, object_store_memory=100 * 2**20)
    critic_node = c.add_node(num_cpus=1, resources={"worker": 1, "critic_group": 1}, object_store_memory=100 * 2**20)
    c.wait_for_nodes()
    yield c, actor_node.node_id, critic_node.node_id
    c.shutdown()


def test_actor_and_critic_land_on_their_node_groups(cluster, tmp_path):
    c, actor_node, critic_node = cluster
    out = tmp_path / "run"
    result = run(
        load_config(
            SMALL
            + [
                f"trainer.output_dir={out}",
                f"trainer.ray.address={c.address}",
                "resource_pool.pools={actor_pool: {GPU: 2, actor_group: 2}, critic_pool: {GPU: 1, critic_group: 1}}",
                "resource_pool.mapping.actor_rollout=actor_pool",
                "resource_pool.mapping.ref=actor_pool",
                "resource_pool.mapping.critic=critic_pool",
            ]
        )
    )
    assert len(result["history"]) == 2
    placement = json.loads((out / "placement.json").read_text())
    assert {info["node_id"] for info in placement["actor_rollout+ref"]["ranks"]} == {actor_node}
    assert {info["node_id"] for info in placement["critic"]["ranks"]} == {critic_node}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(r["ray/transfer_mb"] > 0 for r in rows)  # batches crossed the object store between pools


def test_unplaceable_pool_fails_within_the_timeout(cluster, tmp_path):
    c, _, _ = cluster
    cfg = load_config(
        SMALL
        + [
            f"trainer.output_dir={tmp_path}",
            f"trainer.ray.address={c.address}",
            "trainer.ray.start_timeout_s=3",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "resource_pool.pools.global_pool={GPU: 2, gpu_group: 2}",
        ]
    )
    start = time.monotonic()
    with pytest.raises(PoolPlacementError, match=r"Pool 'global_pool'.*'gpu_group': 1\.0.*within 3 s"):
        run(cfg)
    assert time.monotonic() - start < 60
