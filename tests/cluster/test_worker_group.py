"""A real 2-rank FSDP worker group on a local Ray cluster."""

from __future__ import annotations

import pytest
import ray
import torch
from ray import cloudpickle

from hybridrl.cluster.errors import PoolPlacementError, WorkerCallError, WorkerCallTimeout
from hybridrl.cluster.pools import PoolSpec
from hybridrl.cluster.role_clients import colocated_passes, make_clients, run_forward_passes
from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.config.loader import load_config
from hybridrl.engine.context import DataLayout
from hybridrl.models.tiny import build_tokenizer, ensure_tiny_model
from hybridrl.observability.monitor import RunMonitor
from hybridrl.protocol import Batch

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_cluster(shared_ray_cluster):
    """The session's cluster (2 CPUs here): the group's start and end are the point, not the cluster's."""
    ray.init(
        address=shared_ray_cluster.address(),
        logging_level="WARNING",
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def group(ray_cluster, tmp_path_factory):
    path = ensure_tiny_model(
        tmp_path_factory.mktemp("m"),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        seed=0,
    )
    cfg = load_config(
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "critic.ppo_micro_batch_size_per_gpu=8",
        ]
    )
    pool = PoolSpec.from_resources("global_pool", {"GPU": 2}).on_cpu_only_cluster()
    g = WorkerGroup(pool, ["actor_rollout", "ref"], cfg, path, path, start_timeout_s=120, call_timeout_s=120)
    yield g
    g.shutdown()


PASSES = [("actor_rollout", "compute_log_prob"), ("ref", "compute_ref_log_prob")]


def prompts(n: int) -> Batch:
    tok = build_tokenizer()
    enc = tok([f"{i % 10}{(3 * i) % 10}=" for i in range(n)], padding=True, return_tensors="pt")
    return Batch.from_dict(
        tensors={
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "position_ids": torch.cumsum(enc["attention_mask"], 1) - 1,
        },
        meta={"seed": 1},
    )


def test_ranks_are_distinct_processes(group):
    pids = {info["pid"] for info in group.node_info}
    assert len(pids) == 2 and [info["rank"] for info in group.node_info] == [0, 1]


def test_generate_update_and_replicas_stay_equal(group):
    gen, metas = group.call_dp("actor_rollout", "generate", prompts(17))  # 17 rows: padded to 18, unpadded
    assert len(gen) == 17 and gen.tensors["responses"].shape[1] == 6
    assert len(metas) == 2 and all({s.name for s in r.sub_spans} == {"weight_sync", "generate_worker"} for r in metas)
    assert all(r.span.start <= r.sub_spans[0].start and r.sub_spans[-1].end <= r.span.end for r in metas)
    before = group.call_all("actor_rollout", "state_digest")
    batch = gen[:16]  # 4 prompts x 4 samples: one mini-batch of 8 rows per rank
    old, _ = group.call_dp("actor_rollout", "compute_log_prob", batch)
    ref, _ = group.call_dp("ref", "compute_ref_log_prob", batch)
    # Actor and reference start from the same weights: identical log-probs before any update.
    torch.testing.assert_close(old.tensors["old_log_probs"], ref.tensors["ref_log_probs"])
    batch.union(old)
    batch.tensors["advantages"] = torch.linspace(-1, 1, 16)[:, None].expand(-1, 6).clone()
    batch.meta = {"seed": 1}
    metrics = [r.value for r in group.call_split("actor_rollout", "update_actor", batch)]
    assert all(m["actor/grad_norm"] > 0 for m in metrics)
    after = group.call_all("actor_rollout", "state_digest")
    assert after[0]["train"] == after[1]["train"] != before[0]["train"]
    group.call_dp("actor_rollout", "generate", prompts(2))  # hands the new weights to generation
    synced = group.call_all("actor_rollout", "state_digest")
    assert synced[0]["rollout"] == synced[1]["rollout"] == synced[0]["train"]


def test_colocated_forward_passes_go_out_as_one_call(group):
    gen, _ = group.call_dp("actor_rollout", "generate", prompts(15))  # 15 rows: padded to 16 over 2 ranks
    alone = [group.call_dp(role, method, gen)[0] for role, method in PASSES]
    actor, ref = make_clients([group]).actor_rollout, make_clients([group]).ref
    assert ref is not None
    together = colocated_passes([actor.log_prob_pass(), ref.ref_pass()])
    assert [[p.phase for p in t] for t in together] == [["old_log_prob", "ref"]]
    out, seconds = run_forward_passes(together[0], gen)
    assert len(out) == 15 and set(seconds) == {"old_log_prob", "ref"} and all(s > 0 for s in seconds.values())
    for part in alone:
        for key in part.tensors.keys():
            torch.testing.assert_close(out.tensors[key], part.tensors[key], rtol=0, atol=0)


def test_errors_name_role_rank_and_method(group):
    with pytest.raises(
        WorkerCallError, match=r"actor_rollout\+ref worker rank [01] failed in ref.nope: Role 'ref' has no method"
    ):
        group.call_all("ref", "nope")
    with pytest.raises(WorkerCallTimeout, match=r"rank\(s\) \[0, 1\] did not finish actor_rollout.generate"):
        group._wait(
            [a.call.remote("actor_rollout", "generate", prompts(64)) for a in group.actors],
            "actor_rollout.generate",
            timeout_s=1e-4,
        )


def test_unplaceable_pool_fails_fast(ray_cluster, tmp_path):
    pool = PoolSpec.from_resources("huge", {"CPU": 64, "workers": 2})
    cfg = load_config()
    with pytest.raises(PoolPlacementError, match=r"Pool 'huge'.*asked for 2 bundles.*within 1 s"):
        WorkerGroup(pool, ["ref"], cfg, str(tmp_path), str(tmp_path), start_timeout_s=1, call_timeout_s=1)


def test_straggler_warning_names_role_and_rank(group, caplog):
    from hybridrl.observability.monitor import RunMonitor

    def slow_on_rank_1(worker):
        import time

        if worker.rank == 1:
            time.sleep(0.5)  # the slowness under test, not a wait for something
        return worker.rank

    group.monitor = RunMonitor(straggler_factor=2.0, straggler_min_seconds=0.05)
    try:
        assert group.execute_all(slow_on_rank_1) == [0, 1]
    finally:
        monitor, group.monitor = group.monitor, None
    assert len(monitor.straggler_warnings) == 1
    assert "actor_rollout+ref rank 1" in monitor.straggler_warnings[0]
    assert "slow_on_rank_1" in monitor.straggler_warnings[0]
    assert "Straggler" in caplog.text


def test_transfer_counts_each_compact_shard_once(group, monkeypatch):
    batch = prompts(16)
    responses = torch.randint(4, 10, (16, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.cat([batch.tensors["attention_mask"], torch.ones_like(responses)], 1)
    batch.tensors.update(
        {
            "input_ids": torch.cat([batch.tensors["input_ids"], responses], 1),
            "attention_mask": mask,
            "position_ids": torch.cumsum(mask, 1) - 1,
            "responses": responses,
            "response_mask": torch.ones_like(responses),
            "ballast": torch.zeros(16, 2**15),  # 2 MiB: dwarfs the results and Ray's metadata
        }
    )
    whole = len(cloudpickle.dumps(batch.compact()))  # as sent: ids and masks in narrow dtypes
    put_rows: list[int] = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value: put_rows.append(len(value)) or real_put(value))
    key = ("ref", "compute_ref_log_prob")
    group.monitor = monitor = RunMonitor()
    try:
        group.call_dp(*key, batch)  # 2 replicas: 8 rows each
        split_bytes = monitor.step_metrics()["ray/transfer_mb"] * 2**20
        group._layouts[key] = [DataLayout(0, 1, True), DataLayout(0, 1, False)]  # as if tensor-parallel peers
        group.call_dp(*key, batch)
        peer_bytes = monitor.step_metrics()["ray/transfer_mb"] * 2**20
    finally:
        group.monitor = None
        group._layouts.pop(key, None)
    assert put_rows == [8, 8, 16]  # one object per distinct shard, shared by a replica's peers
    # Views would ship the whole batch once per rank (2x); compact shards, put once, ship it once.
    assert whole < split_bytes < whole + 2**16
    assert whole < peer_bytes < whole + 2**16
