"""What of the SGLang engine runs without SGLang: the one-line refusal, and its pure helpers."""

import dataclasses
import importlib.util
import json

import pytest
import torch

from hybridrl.config.schema import RolloutConfig, SamplingConfig
from hybridrl.generation.engines.base import EngineSite
from hybridrl.generation.engines.sglang import (
    SGLangRolloutEngine,
    engine_kwargs,
    physical_gpu,
    replica_ranks,
    replica_requests,
    sampling_params,
    tensor_fingerprint,
    tokens_and_log_probs,
    weights_digest_of,
)
from hybridrl.testing.launch import run_ranks


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None and torch.cuda.is_available(), reason="SGLang can run here"
)
def test_without_sglang_or_cuda_construction_fails_in_one_line_naming_the_fix():
    with pytest.raises(RuntimeError) as err:
        SGLangRolloutEngine(
            RolloutConfig(),
            EngineSite("unused-model-path", False, torch.bfloat16, torch.device("cpu"), 0, 1, max_model_len=64),
        )
    message = str(err.value)
    assert "\n" not in message
    assert "rollout.name=sglang" in message and "pip install 'sglang[all]'" in message
    assert "rollout.name=hf or vllm" in message


def test_replicas_are_consecutive_ranks_led_by_the_first():
    assert replica_ranks(5, 8, 4) == [4, 5, 6, 7]
    assert replica_ranks(3, 8, 2) == [2, 3]
    assert replica_ranks(3, 4, 1) == [3]
    with pytest.raises(
        ValueError, match=r"tensor_model_parallel_size \(4\) must be >= 1 and divide the actor's ranks \(6\)"
    ):
        replica_ranks(0, 6, 4)
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size \(0\)"):
        replica_ranks(0, 4, 0)


def test_physical_gpu_reads_the_visible_devices():
    assert physical_gpu(0, None) == "0"
    assert physical_gpu(2, "") == "2"
    assert physical_gpu(0, "3") == "3"  # a Ray worker: one GPU, the node's fourth
    assert physical_gpu(1, "4, 6") == "6"
    assert physical_gpu(0, "GPU-8e3f,GPU-11aa") == "GPU-8e3f"


def test_engine_kwargs_map_the_rollout_settings_to_sglang_names():
    cfg = dataclasses.replace(
        RolloutConfig(),
        tensor_model_parallel_size=2,
        gpu_memory_utilization=0.4,
        max_num_seqs=64,
        max_num_batched_tokens=4096,
        enable_chunked_prefill=True,
        enable_prefix_caching=True,
        enforce_eager=False,
        free_cache_engine=True,
        load_format="dummy",
    )
    kw = engine_kwargs(cfg, EngineSite("/m", True, torch.bfloat16, torch.device("cuda"), 0, 1, 1536, seed=7))
    assert kw["tp_size"] == 2 and kw["dtype"] == "bfloat16" and kw["mem_fraction_static"] == 0.4
    assert kw["max_running_requests"] == 64 and kw["chunked_prefill_size"] == 4096
    assert kw["disable_radix_cache"] is False and kw["disable_cuda_graph"] is False
    assert kw["enable_memory_saver"] is True and kw["load_format"] == "dummy"
    assert kw["context_length"] == 1536 and kw["random_seed"] == 7 and kw["skip_tokenizer_init"] is True
    off = dataclasses.replace(
        cfg, enable_chunked_prefill=False, enable_prefix_caching=False, enforce_eager=True, free_cache_engine=False
    )
    kw = engine_kwargs(off, EngineSite("/m", False, torch.float32, torch.device("cuda"), 0, 1, 64))
    assert kw["chunked_prefill_size"] == -1 and kw["disable_radix_cache"] is True
    assert kw["disable_cuda_graph"] is True and kw["enable_memory_saver"] is False and kw["dtype"] == "float32"


def test_sampling_params_greedy_top_k_off_and_seed():
    def params(do_sample: bool, top_k: int, seed: int | None) -> dict:
        sampling = SamplingConfig(do_sample=do_sample, temperature=0.7, top_k=top_k, top_p=0.9)
        return sampling_params(max_new_tokens=8, sampling=sampling, stop=[2, 5], seed=seed)

    sampled = params(True, 0, 11)
    assert sampled == dict(
        max_new_tokens=8, temperature=0.7, top_k=-1, top_p=0.9, stop_token_ids=[2, 5], sampling_seed=11
    )
    assert params(True, -1, None)["top_k"] == -1
    assert params(True, 20, None)["top_k"] == 20
    greedy = params(False, 20, None)
    assert greedy == dict(max_new_tokens=8, temperature=0.0, top_k=-1, top_p=1.0, stop_token_ids=[2, 5])


def test_replica_ranks_with_the_same_rows_share_one_generation():
    prompts = [[1, 2], [3]]
    flat, seeds, slices = replica_requests([(prompts, [10, 11]), (prompts, [20, 21])])
    assert flat == prompts and seeds == [10, 11]  # the leader's seeds
    assert slices == [slice(0, 2), slice(0, 2)]


def test_replica_ranks_with_their_own_rows_each_get_theirs_back():
    per_rank = [([[1, 2], [3]], [10, 11]), ([[4]], [20]), ([], [])]
    flat, seeds, slices = replica_requests(per_rank)
    assert flat == [[1, 2], [3], [4]] and seeds == [10, 11, 20]
    assert [flat[s] for s in slices] == [[[1, 2], [3]], [[4]], []]


def test_tokens_and_log_probs_come_from_the_output_token_logprobs():
    output = {
        "output_ids": [7, 8, 2],
        "meta_info": {"output_token_logprobs": [(-0.5, 7, None), (-1.25, 8, None), (-0.1, 2, None)]},
    }
    assert tokens_and_log_probs(output) == ([7, 8, 2], [-0.5, -1.25, -0.1])


def test_fingerprint_is_exact_and_sees_any_change_or_move():
    torch.manual_seed(0)
    w = torch.randn(64, 33).to(torch.bfloat16)
    assert tensor_fingerprint(w) == tensor_fingerprint(w.clone())
    assert tensor_fingerprint(w.t()) == tensor_fingerprint(w.t().contiguous())  # bytes in logical order
    changed = w.clone()
    changed[5, 7] = changed[5, 7] * 2 + 1
    assert tensor_fingerprint(changed) != tensor_fingerprint(w)
    swapped = w.clone()
    swapped[[0, 1]] = w[[1, 0]]
    assert tensor_fingerprint(swapped)[0] == tensor_fingerprint(w)[0]  # same bytes...
    assert tensor_fingerprint(swapped) != tensor_fingerprint(w)  # ...elsewhere
    assert tensor_fingerprint(torch.tensor([1, 2, 3], dtype=torch.int8)) == (6, 1 * 1 + 2 * 2 + 3 * 3)
    assert tensor_fingerprint(torch.tensor(1.0)) == tensor_fingerprint(torch.tensor([1.0]))


def test_fingerprint_spans_chunks(monkeypatch):
    import hybridrl.generation.engines.sglang as engine

    w = torch.arange(1000, dtype=torch.int16)
    whole = tensor_fingerprint(w)
    monkeypatch.setattr(engine, "_FINGERPRINT_CHUNK", 7)  # 2000 bytes in 286 steps
    assert tensor_fingerprint(w) == whole


def test_weights_digest_depends_on_contents_not_arrival_order():
    a = {"x.weight": (1, 2), "y.bias": (3, 4)}
    assert weights_digest_of(a) == weights_digest_of(dict(reversed(list(a.items()))))
    assert weights_digest_of(a) != weights_digest_of({**a, "y.bias": (3, 5)})
    assert weights_digest_of(a) != weights_digest_of({"x.weight": (1, 2)})


def test_free_cache_engine_needs_sglang_that_backs_weights_up(monkeypatch):
    from hybridrl.generation.engines.sglang import _runtime_kwargs

    for name in (
        "SGL_DISABLE_TP_MEMORY_INBALANCE_CHECK",
        "SGLANG_DISABLE_TP_MEMORY_INBALANCE_CHECK",
        "SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK",
    ):
        monkeypatch.delenv(name, raising=False)  # restored after the test
    frees = dataclasses.replace(RolloutConfig(), free_cache_engine=True)
    with pytest.raises(RuntimeError, match=r"free_cache_engine=true with SGLang needs sglang>=0.5.3") as err:
        _runtime_kwargs(frees, {"model_path", "enable_memory_saver"})
    assert "\n" not in str(err.value)
    kw = _runtime_kwargs(frees, {"model_path", "enable_weights_cpu_backup"})
    assert kw["enable_weights_cpu_backup"] is True and kw["port"] > 0 and kw["nccl_port"] > 0
    kept = _runtime_kwargs(dataclasses.replace(frees, free_cache_engine=False), {"model_path"})
    assert "enable_weights_cpu_backup" not in kept


def replica_collectives_on_rank(rank: int, world_size: int, out_dir: str) -> None:
    from hybridrl.generation.engines.sglang import ReplicaGroup

    replica = ReplicaGroup(rank, world_size, 2)
    gathered = replica.gather(rank * 10)
    mine = replica.on_leader(lambda: [f"{v}->{i}" for i, v in enumerate(gathered)], per_rank=True)
    nothing = replica.on_leader(lambda: [])  # not per rank: its result is not handed out
    try:
        replica.on_leader(lambda: 1 / 0 if rank == 2 else None)  # fails on the second replica's leader only
        failure = None
    except (ZeroDivisionError, RuntimeError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(
            {"leader": replica.leader, "gathered": gathered, "mine": mine, "nothing": nothing, "failure": failure}, f
        )


def test_replica_leader_hands_each_rank_its_item_and_its_failure(tmp_path):
    run_ranks(replica_collectives_on_rank, 4, str(tmp_path))
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    assert [s["leader"] for s in seen] == [0, 0, 2, 2]
    assert [s["gathered"] for s in seen] == [[0, 10], [], [20, 30], []]
    assert [s["mine"] for s in seen] == ["0->0", "10->1", "20->0", "30->1"]
    assert all(s["nothing"] is None for s in seen)
    assert seen[0]["failure"] is None and seen[1]["failure"] is None  # the other replica is not affected
    assert seen[2]["failure"] == "ZeroDivisionError: division by zero"
    assert seen[3]["failure"] == (
        "RuntimeError: SGLang on rank 2 (this replica's leader) failed: ZeroDivisionError: division by zero"
    )
