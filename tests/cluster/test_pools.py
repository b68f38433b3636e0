import pytest

from hybridrl.cluster.pools import PoolSpec, ResourcePoolManager


def test_seed_keyword_form():
    m = ResourcePoolManager(actor_rollout={"GPU": 4}, critic={"GPU": 2}, reward={"CPU": 16})
    assert m.pool_of("actor_rollout").num_workers == 4
    assert m.pool_of("critic").bundles() == [{"CPU": 1.0, "GPU": 1.0}] * 2
    reward = m.pool_of("reward")
    assert reward.num_workers == 1 and reward.bundles() == [{"CPU": 16.0}]
    assert m.total() == {"CPU": 22.0, "GPU": 6.0}


def test_role_mapping_colocates_roles():
    m = ResourcePoolManager(
        pools={"gpu_group": {"GPU": 4}, "cpu_intensive": {"CPU": 16, "workers": 4}},
        mapping={"actor_rollout": "gpu_group", "critic": "gpu_group", "reward": "cpu_intensive"},
    )
    assert m.roles_of("gpu_group") == ["actor_rollout", "critic"]
    assert [p.name for p in m.used_pools()] == ["gpu_group", "cpu_intensive"]
    assert m.pool_of("reward").bundles() == [{"CPU": 4.0}] * 4


def test_cpu_only_cluster_turns_gpus_into_cpu_workers(caplog):
    m = ResourcePoolManager(actor_rollout={"GPU": 2}).for_cluster(cluster_gpus=0)
    assert m.pool_of("actor_rollout").bundles() == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert "runs its 2 GPU workers as 2 CPU workers of 1 CPUs each" in caplog.text
    same = ResourcePoolManager(actor_rollout={"GPU": 2}).for_cluster(cluster_gpus=8)
    assert same.pool_of("actor_rollout").bundles()[0]["GPU"] == 1.0


def test_cpu_workers_share_the_clusters_cores():
    """Each worker's bundle is its torch thread count: one worker on 2 cores gets 2, two get 1 each, a split
    1 + 1 layout 1 each, and more workers than cores still 1."""

    def cpus(cluster_cpus, **pools):
        m = ResourcePoolManager(
            pools={name: {"GPU": n} for name, n in pools.items()}, mapping={f"role_{p}": p for p in pools}
        ).for_cluster(cluster_gpus=0, cluster_cpus=cluster_cpus)
        return [bundle["CPU"] for spec in m.used_pools() for bundle in spec.bundles()]

    assert cpus(2, one=1) == [2.0]
    assert cpus(2, one=2) == [1.0, 1.0]
    assert cpus(2, rollout=1, train=1) == [1.0, 1.0]
    assert cpus(16, one=4) == [4.0] * 4
    assert cpus(2, one=4) == [1.0] * 4
    asked = ResourcePoolManager(pools={"p": {"GPU": 1, "CPU": 3}}, mapping={"r": "p"}).for_cluster(0, cluster_cpus=2)
    assert asked.pool_of("r").bundles() == [{"CPU": 3.0}]  # what the pool asked for per worker


def test_custom_resource_labels_are_split_per_bundle():
    spec = PoolSpec.from_resources("p", {"GPU": 2, "gpu_group": 2})
    assert spec.bundles() == [{"CPU": 1.0, "gpu_group": 1.0, "GPU": 1.0}] * 2


@pytest.mark.parametrize(
    "resources,match",
    [
        ({}, "no GPU and no CPU"),
        ({"GPU": 1.5}, "whole number"),
        ({"GPU": 2, "workers": 3}, "one worker per GPU"),
        ({"CPU": -1}, "must not be negative"),
    ],
)
def test_bad_pools(resources, match):
    with pytest.raises(ValueError, match=match):
        PoolSpec.from_resources("p", resources)


def test_mapping_to_undefined_pool():
    with pytest.raises(ValueError, match="not defined"):
        ResourcePoolManager(pools={"a": {"GPU": 1}}, mapping={"critic": "b"})
