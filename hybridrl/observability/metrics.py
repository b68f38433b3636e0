"""Step metrics computed on the driver from the gathered batch (verl's names where they exist)."""

from __future__ import annotations

import numpy as np
import torch

from hybridrl.protocol import Batch

#: Prefixes of the metrics that measure the machine or the transport, not the computation (ray/transfer_mb
#: counts pickled bytes, which change with a module path).
MACHINE_PREFIXES = (
    "ray/",
    "timing_s/",
    "timing_per_token_ms/",
    "perf/",
    "throughput",
    "resource/",
    "memory/",
    "cluster/",
    "worker/",
)


def machine_metric(key: str) -> bool:
    """Whether ``key`` measures the machine (timings, throughput, MFU, memory, CPU), so that two runs of one
    computation may differ in it (bench/same_metrics.py, the runs that compare layouts)."""
    return key.startswith(MACHINE_PREFIXES) or "time" in key or "_s/" in key or key.endswith(("_s", "_ms", "mfu"))


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    return {
        f"{prefix}/mean": float(values.mean()),
        f"{prefix}/max": float(values.max()),
        f"{prefix}/min": float(values.min()),
    }


def data_metrics(batch: Batch, max_response_length: int) -> dict[str, float]:
    t = batch.tensors
    mask = t["response_mask"].bool()
    prompt_width = t["prompts"].shape[1]
    resp_len = t["attention_mask"][:, prompt_width:].sum(-1).float()  # multi-turn: the tools' tokens too, as verl
    prompt_len = t["attention_mask"][:, :prompt_width].sum(-1).float()
    metrics = {
        **_stats("critic/score", t["token_level_scores"].sum(-1)),
        **_stats("critic/rewards", t["token_level_rewards"].sum(-1)),
        **_stats("critic/advantages", t["advantages"][mask]),
        **_stats("critic/returns", t["returns"][mask]),
        **_stats("response_length", resp_len),
        "response_length/clip_ratio": float((resp_len == max_response_length).float().mean()),
        **_stats("prompt_length", prompt_len),
    }
    if "values" in t.keys():
        metrics.update(_stats("critic/values", t["values"][mask]))
    return metrics | agent_metrics(batch)


def agent_metrics(batch: Batch) -> dict[str, float]:
    """Multi-turn rollouts (the agent loop's per-sample columns): verl's ``num_turns/*``, tool calls per
    sample, failed and timed-out calls, the model's tokens per turn and the tools' step rewards."""
    nt = batch.non_tensors
    if "num_turns" not in nt:
        return {}

    def column(key: str) -> torch.Tensor:
        return torch.as_tensor(np.asarray(nt[key], dtype=np.float64))

    calls = column("tool_calls")
    return {
        **_stats("num_turns", column("num_turns")),
        **_stats("tool_calls", calls),
        "tool_calls/samples_with_call": float((calls > 0).double().mean()),
        "tool_calls/errors": float(column("tool_errors").sum()),
        "tool_calls/timeouts": float(column("tool_timeouts").sum()),
        "tool_calls/step_reward_mean": float(column("tool_rewards").mean()),
        "response_length/tokens_per_turn_mean": float(column("tokens_per_turn").mean()),
    }


def throughput_metrics(batch: Batch, step_time: float, num_workers: int) -> dict[str, float]:
    total_tokens = int(batch.tensors["attention_mask"].sum())
    new_tokens = int(batch.tensors["response_mask"].sum())
    return {
        "perf/total_num_tokens": float(total_tokens),
        "perf/time_per_step": step_time,
        "perf/throughput": total_tokens / step_time / num_workers,  # tokens/s per worker, as verl
        "perf/gen_tokens_per_s": new_tokens / step_time,
    }
