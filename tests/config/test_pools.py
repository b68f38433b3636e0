import pytest

from hybridrl.config.pools import PoolSpec, ResourcePoolManager


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
    assert "runs its 2 GPU workers as 2 CPU workers" in caplog.text
    same = ResourcePoolManager(actor_rollout={"GPU": 2}).for_cluster(cluster_gpus=8)
    assert same.pool_of("actor_rollout").bundles()[0]["GPU"] == 1.0


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
