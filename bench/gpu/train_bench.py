"""GPU check, step train: a GRPO-style actor update through hybridrl's own actor role, against a plain PyTorch loop.

One process (one rank of ``hybridrl.testing.launch.run_ranks``: NCCL on a GPU, gloo on the CPU), one
model with random weights written to a temporary directory, one ragged GRPO batch (U prompts x n samples,
prompt and response lengths uniform in the given ranges). Paths, each built fresh, the previous one freed:

  d   plain loop written here: the same HF model class, fp32 weights + autocast(bf16), padded micro-batches,
      full logits, log_softmax + gather of the response tokens, the PPO clipped loss (token-mean), AdamW
  a   ActorRolloutRole.update_actor, the project's GPU settings (precision=bf16, fsdp.mixed_precision=true,
      as examples/ppo_gsm8k.yaml), padded micro-batches, use_prefix_grouper off
  c   as a with use_prefix_grouper on (the schema's default)
  b0  as a with use_remove_padding + use_dynamic_bsz (token budget)
  b   as b0 with use_fused_kernels

Paths run in the order given (default d,b,b0,a,c: the most telling first, in case the time runs short).
Each path: warm-up iterations, then timed ones (synchronised); the median is reported, with real tokens/s,
MFU (6 x non-embedding parameters x real tokens / time, and the project's FlopsModel, against the measured
matmul peak and the spec peak) and the peak memory of the update (torch.cuda.max_memory_allocated, reset
after the build). Results are written to --out after every path, so a crash keeps what was measured.

With --profile-file (or PROFILE_FILE in the environment), each path makes one more call under
torch.profiler and appends its top-20 operators by self device time to that file, when the time left allows
it (the paths still to run come first).

    python bench/gpu/train_bench.py --device cuda --shape 1.5b --out train.json [--profile-file profile.txt]
"""

from __future__ import annotations

import argparse
import functools
import gc
import inspect
import json
import math
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

SHAPES: dict[str, dict[str, Any]] = {
    "1.5b": dict(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
    ),
    "0.5b": dict(
        hidden_size=896,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
    ),
    "small": dict(  # bench/ragged.py's CPU model: about 21M parameters in its layers
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=1024,
        vocab_size=32768,
    ),
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=2048,
    ),
}
SPEC_TFLOPS = 989.0  # H100/H200 SXM dense bf16 datasheet peak
PATH_DOC = {
    "d": "plain loop (HF model, fp32 + autocast bf16, padded, full logits, AdamW)",
    "a": "hybridrl actor, bf16 + FSDP2 mixed precision, padded micro-batches, prefix sharing off",
    "c": "hybridrl actor, as a + use_prefix_grouper (shared prompts)",
    "b0": "hybridrl actor, as a + use_remove_padding + use_dynamic_bsz",
    "b": "hybridrl actor, as b0 + use_fused_kernels",
    "b0_dense": "as b0 with the packed rows' attention of before: sdpa on Hugging Face's block-diagonal (T x T) mask",
}


def log(msg: str) -> None:
    print(f"[train_bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- model, batch, peak -----------------------------------------------------------------------------
def write_model(directory: Path, shape: dict[str, Any], device: torch.device) -> dict[str, float]:
    """A Qwen2-shaped model with random weights (fp32, tied embeddings as Qwen2.5 <= 3B), beside the
    project's character tokenizer (the model's vocabulary is larger than the tokenizer's: ids are random)."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from hybridrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        **shape,
        tie_word_embeddings=True,
        max_position_embeddings=32768,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=None,
    )
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model: Any = Qwen2ForCausalLM(config)  # Any: transformers' decorators confuse type checkers
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id)
    model.to("cpu")
    t1 = time.perf_counter()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    t2 = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight
    untied_head = 0 if head is model.get_input_embeddings().weight else head.numel()
    del model
    gc.collect()
    return {
        "params": float(params),
        "non_embedding_params": float(params - embedding - untied_head),
        "build_s": t1 - t0,
        "save_s": t2 - t1,
    }


def make_batch(args: argparse.Namespace, vocab: int) -> dict[str, torch.Tensor]:
    """U prompts x n samples: left-padded prompts (shared by the n rows of a group), right-padded responses."""
    rng = np.random.default_rng(args.seed)
    rows = args.prompts * args.n
    p_max, r_max = args.prompt_max, args.resp_max
    length = p_max + r_max
    ids = np.zeros((rows, length), dtype=np.int64)
    attention = np.zeros((rows, length), dtype=np.int64)
    response_mask = np.zeros((rows, r_max), dtype=np.int64)
    for u in range(args.prompts):
        plen = int(rng.integers(args.prompt_min, p_max + 1))
        prompt = rng.integers(3, vocab, size=plen)
        for j in range(args.n):
            r = u * args.n + j
            ids[r, p_max - plen : p_max] = prompt
            attention[r, p_max - plen : p_max] = 1
            rlen = int(rng.integers(args.resp_min, r_max + 1))
            ids[r, p_max : p_max + rlen] = rng.integers(3, vocab, size=rlen)
            attention[r, p_max : p_max + rlen] = 1
            response_mask[r, :rlen] = 1
    scores = rng.standard_normal(rows).reshape(args.prompts, args.n)
    scores = (scores - scores.mean(1, keepdims=True)) / (scores.std(1, keepdims=True) + 1e-6)  # GRPO's
    input_ids = torch.from_numpy(ids)
    attention_mask = torch.from_numpy(attention)
    mask = torch.from_numpy(response_mask)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": input_ids[:, p_max:].clone(),
        "response_mask": mask,
        "advantages": torch.from_numpy(scores.reshape(rows, 1).astype(np.float32)) * mask.float(),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_tflops(device: torch.device, size: int, iters: int = 10) -> float:
    """bf16 matmul TFLOP/s by the project's own calibration (best of ``iters``)."""
    from hybridrl.observability.perf.device_peak import calibrate_matmul_flops

    return calibrate_matmul_flops(device, torch.bfloat16, size=size, repeats=iters, budget_s=5.0) / 1e12


def dtype_kwarg(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """``dtype=`` for transformers >= 4.56 (5.x on both machines), ``torch_dtype=`` before."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def mem_gb(device: torch.device, peak: bool) -> float | None:
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()) / 2**30


# -- the paths --------------------------------------------------------------------------------------
def project_overrides(args: argparse.Namespace, path: str, model_dir: str) -> list[str]:
    common = [
        f"actor_rollout_ref.model.path={model_dir}",  # a run of this model, not the built-in tiny run's preset
        "algorithm.adv_estimator=grpo",
        "resource_pool.pools.global_pool.GPU=1",
        f"data.train_batch_size={args.prompts}",
        f"data.max_prompt_length={args.prompt_max}",
        f"data.max_response_length={args.resp_max}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=false",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.actor.precision={args.precision}",
        f"actor_rollout_ref.actor.fsdp.mixed_precision={str(args.precision == 'bf16').lower()}",
        "actor_rollout_ref.actor.optim.lr=1e-6",  # as the plain loop (the tiny-model preset's 1e-3 makes paths diverge)
    ]
    packed = [
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={args.max_tokens}",
    ]
    extra = {
        "a": ["actor_rollout_ref.actor.use_prefix_grouper=false"],
        "c": ["actor_rollout_ref.actor.use_prefix_grouper=true"],
        "b0": packed,
        "b0_dense": packed,
        "b": [*packed, "actor_rollout_ref.model.use_fused_kernels=true"],
    }[path]
    return common + extra


def run_project(
    args: argparse.Namespace, path: str, model_dir: str, batch: dict[str, torch.Tensor], device: torch.device, mesh: Any
) -> dict[str, Any]:
    from hybridrl.config.loader import load_config
    from hybridrl.engine.context import WorkerContext
    from hybridrl.protocol import Batch
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    overrides = project_overrides(args, path, model_dir)
    cfg = load_config(overrides)
    ctx = WorkerContext(0, 1, device, mesh, model_dir, model_dir)
    reset_peak(device)
    t0 = time.perf_counter()
    if path == "b0_dense":  # the model built as before packed attention: sdpa, so transformers builds the mask
        import hybridrl.workers.actor_rollout as actor_module

        chosen = actor_module.attention_implementation
        actor_module.attention_implementation = lambda packed: "sdpa"  # type: ignore[assignment]
        try:
            role = ActorRolloutRole.from_config(cfg, ctx)
        finally:
            actor_module.attention_implementation = chosen
    else:
        role = ActorRolloutRole.from_config(cfg, ctx)
    sync(device)
    build_s = time.perf_counter() - t0
    engine = role.engine
    info: dict[str, Any] = {
        "overrides": overrides,
        "build_s": build_s,
        "build_peak_gb": mem_gb(device, peak=True),
        "engine": {
            "model_class": type(engine.model).__name__,
            "fsdp2": any("FSDP" in type(m).__name__ for m in engine.model.modules()),
            "attn_implementation": getattr(getattr(engine.model, "config", None), "_attn_implementation", None),
            "param_dtype": str(next(engine.model.parameters()).dtype),
            "precision": str(getattr(engine, "precision", None)),
            "remove_padding": getattr(engine, "remove_padding", None),
            "fused_kernels": getattr(engine, "fused_kernels", None),
            "share_prompts": getattr(engine, "share_prompts", None),
        },
    }
    shard = Batch.from_dict(tensors={k: v.clone() for k, v in batch.items()}, meta={"seed": 1})
    # How the update cuts the batch (the same split update_actor makes).
    from hybridrl.workers.forward import MicroBatching

    micro, _ = MicroBatching.for_update(cfg.actor_rollout_ref.actor, "actor").split(shard, engine)
    info["micro_batches"] = len(micro)
    info["micro_batch_real_tokens"] = [int(mb.tensors["attention_mask"].sum()) for mb in micro]
    if getattr(engine, "share_prompts", False):
        try:
            from hybridrl.engine.prompt_sharing import prompt_groups

            t = micro[0].tensors
            p = t["input_ids"].shape[1] - t["responses"].shape[1]
            groups = prompt_groups(t["input_ids"], t["attention_mask"], t["position_ids"], p)
            info["prefix_sharing_applies"] = groups is not None
        except Exception as exc:  # a detail of the report, not a reason to lose the path
            info["prefix_sharing_applies"] = f"unknown ({type(exc).__name__}: {str(exc)[:200]})"
    reset_peak(device)
    resident = mem_gb(device, peak=False)

    step = functools.partial(role.update_actor, shard)  # not a closure: deleting its names frees the model
    out = timed(args, step, device)
    out.update(info)
    out["resident_gb"] = resident
    out["peak_gb"] = mem_gb(device, peak=True)
    del step, role, engine, shard, micro
    reset_peak(device)
    return out


def run_plain(
    args: argparse.Namespace, model_dir: str, batch: dict[str, torch.Tensor], device: torch.device
) -> dict[str, Any]:
    """What a user writes by hand: fp32 weights, autocast(bf16) forward, the logits of every position,
    log_softmax + gather at the response positions, the PPO clipped loss (token-mean), AdamW."""
    from transformers import AutoModelForCausalLM

    reset_peak(device)
    t0 = time.perf_counter()
    model: Any = AutoModelForCausalLM.from_pretrained(
        model_dir, **dtype_kwarg(torch.float32), attn_implementation="sdpa"
    )
    model = model.to(device)
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01, eps=1e-8)
    attn_implementation = model.config._attn_implementation
    held: dict[str, Any] = {
        "model": model,
        "optimizer": optimizer,
    }  # what step uses: cleared at the end to free the memory
    del model, optimizer
    sync(device)
    build_s = time.perf_counter() - t0
    resp_len = batch["responses"].shape[1]
    rows = batch["input_ids"].shape[0]
    total = float(batch["response_mask"].sum())
    clip = 0.2

    def step() -> dict[str, float]:
        model, optimizer = held["model"], held["optimizer"]
        losses = []
        for s in range(0, rows, args.micro):
            mb = {k: v[s : s + args.micro].to(device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = model(
                    input_ids=mb["input_ids"], attention_mask=mb["attention_mask"], position_ids=mb["position_ids"]
                ).logits
            logits = logits[:, -resp_len - 1 : -1].float()
            log_prob = torch.log_softmax(logits, dim=-1).gather(-1, mb["responses"].unsqueeze(-1)).squeeze(-1)
            old = log_prob.detach()  # exactly on-policy, as GRPO's single epoch and mini-batch
            ratio = torch.exp(log_prob - old)
            adv = mb["advantages"]
            pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip))
            mask = mb["response_mask"].float()
            loss = (pg * mask).sum() / total
            loss.backward()
            losses.append(float(loss.detach()))
            del logits, log_prob, ratio, pg, loss
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return {"loss": sum(losses), "grad_norm": float(grad_norm)}

    reset_peak(device)
    resident = mem_gb(device, peak=False)
    out = timed(args, step, device)
    del step
    out.update(
        {
            "build_s": build_s,
            "resident_gb": resident,
            "peak_gb": mem_gb(device, peak=True),
            "micro_batches": math.ceil(rows / args.micro),
            "engine": {"attn_implementation": attn_implementation, "param_dtype": "torch.float32"},
        }
    )
    held.clear()
    reset_peak(device)
    return out


def run_path(
    args: argparse.Namespace, path: str, model_dir: str, batch: dict[str, torch.Tensor], device: torch.device, mesh: Any
) -> dict[str, Any]:
    """One path; where it runs out of GPU memory (the plain loop's full logits peaked at 85 GB on the H200, over
    an H100's 80), once more with half the rows per micro-batch and half the token budget, said in its figures."""

    def once(tried: argparse.Namespace) -> dict[str, Any]:
        if path == "d":
            return run_plain(tried, model_dir, batch, device)
        return run_project(tried, path, model_dir, batch, device, mesh)

    try:
        return once(args)
    except torch.OutOfMemoryError as exc:
        if args.micro < 2:
            raise
        oom = f"{type(exc).__name__} at {args.micro} rows / {args.max_tokens} tokens per micro-batch"
    reset_peak(device)  # outside the except block: the traceback's frames (and their model) are gone
    half = argparse.Namespace(**{**vars(args), "micro": args.micro // 2, "max_tokens": args.max_tokens // 2})
    log(f"path {path}: {oom}; again with {half.micro} rows / {half.max_tokens} tokens")
    return {**once(half), "out_of_memory_first": oom}


CURRENT_PATH = "?"
# Set by on_rank: where profiles go, and the time the paths still to run need (profiles yield to them).
PROFILE: dict[str, Any] = {"file": None, "deadline": math.inf, "reserve_s": 0.0}


def sort_key(device: torch.device, averages: Any) -> str:
    """The profiler's column of self time on the device (its name changed across torch versions)."""
    if device.type != "cuda":
        return "self_cpu_time_total"
    for key in ("self_device_time_total", "self_cuda_time_total"):
        if averages and hasattr(averages[0], key):
            return key
    return "self_cuda_time_total"


def profile_one(fn: Any, device: torch.device, title: str, estimate_s: float = 0.0, target: str | None = None) -> bool:
    """With a profile file: one more call of fn under torch.profiler, its top-20 operators by self device time
    appended to that file, if about ``estimate_s`` (x2.5 for the profiler's overhead) fits in the time left."""
    target = target or PROFILE["file"] or os.environ.get("PROFILE_FILE")
    if not target:
        return False
    left = PROFILE["deadline"] - time.perf_counter() - PROFILE["reserve_s"]
    needed = 2.5 * estimate_s + 3.0
    if needed > left:
        log(f"  profile of {title}: skipped (needs about {needed:.0f} s, {left:.0f} s to spare)")
        with open(target, "a") as f:
            f.write(f"\n===== {title}: not profiled (time budget: needs about {needed:.0f} s, {left:.0f} s to spare)\n")
        return False
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    t0 = time.perf_counter()
    try:
        sync(device)
        with profile(activities=acts) as prof:
            fn()
            sync(device)
        wall = time.perf_counter() - t0
        averages = prof.key_averages()
        key = sort_key(device, averages)
        table = averages.table(sort_by=key, row_limit=20, max_name_column_width=70)
        text = (
            f"\n===== {title}: one profiled call {wall:.3f} s (profiler overhead included), sorted by {key}\n{table}\n"
        )
    except Exception as exc:  # a profile is a bonus: never lose the measurement for it
        text = f"\n===== {title}: profiling FAILED {type(exc).__name__}: {str(exc)[:300]}\n"
    with open(target, "a") as f:
        f.write(text)
    log(f"  profile of {title}: {time.perf_counter() - t0:.1f} s")
    return True


def timed(args: argparse.Namespace, step: Any, device: torch.device) -> dict[str, Any]:
    times = []
    metrics: dict[str, float] = {}
    first: dict[str, float] = {}
    for i in range(args.warmup + args.iters):
        sync(device)
        t0 = time.perf_counter()
        metrics = step()
        if i == 0:  # the same weights and batch in every path: the paths' numerics side by side
            first = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}
        sync(device)
        seconds = time.perf_counter() - t0
        log(f"  iter {i} {'warm-up' if i < args.warmup else 'timed'}: {seconds:.3f} s")
        if i >= args.warmup:
            times.append(seconds)
    median = statistics.median(times)
    profiled = profile_one(step, device, f"train path {CURRENT_PATH}: {PATH_DOC.get(CURRENT_PATH, '')}", median)
    keep = {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, (int, float))
        and k.split("/")[-1] in ("pg_loss", "grad_norm", "loss", "entropy", "pg_clipfrac", "ppo_kl")
    }
    return {
        "times_s": times,
        "median_s": median,
        "profiled": profiled,
        "last_metrics": keep,
        "first_metrics": first,
    }


# -- the rank ---------------------------------------------------------------------------------------
def project_flops(
    flops_module: Any, config: dict[str, Any], lengths: list[int], response_tokens: int
) -> dict[str, Any]:
    """The update's FLOPs by the project's FlopsModel (from_hf_config and forward_flops only: the class may
    gain methods), x its training-pass multiplier; with the output head counted on the response tokens
    too, where forward_flops takes ``head_tokens``."""
    out: dict[str, Any] = {}
    try:
        model = flops_module.FlopsModel.from_hf_config(config)
        multiplier = float(getattr(flops_module, "TRAIN_PASS_MULTIPLIER", 3))
        out["project_multiplier"] = multiplier
        out["project_flops"] = multiplier * float(model.forward_flops(lengths))
        if "head_tokens" in inspect.signature(model.forward_flops).parameters:
            out["project_flops_head_on_responses"] = multiplier * float(
                model.forward_flops(lengths, head_tokens=response_tokens)
            )
    except Exception as exc:
        out["project_flops_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return out


def on_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    global CURRENT_PATH
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.observability.perf import flops as flops_module

    device = torch.device(args.device, rank) if args.device == "cuda" else torch.device("cpu")
    started = time.perf_counter()
    deadline = started + args.budget_s
    result: dict[str, Any] = {
        "args": vars(args),
        "paths": {},
        "path_doc": PATH_DOC,
        "note": "tokens/s and MFU count every row's real tokens (a shared prompt once per sample), so the "
        "prefix-sharing path's figures are effective ones: it computes fewer tokens",
    }
    out = Path(args.out)

    def save() -> None:
        result["elapsed_s"] = time.perf_counter() - started
        tmp_out = out.with_suffix(".tmp")
        tmp_out.write_text(json.dumps(result, indent=1, default=str))
        tmp_out.replace(out)  # whole, even if the step is killed while writing

    if device.type == "cuda":
        result["device_name"] = torch.cuda.get_device_name(device)
    result["matmul_tflops"] = matmul_tflops(device, 8192 if device.type == "cuda" else 512)
    log(f"measured bf16 matmul: {result['matmul_tflops']:.1f} TFLOP/s")
    mesh = init_device_mesh(device.type, (world,))
    shape = SHAPES[args.shape]
    root = Path(args.workdir)
    model_dir = root / f"model-{args.shape}"
    result["model"] = {"shape_name": args.shape, **shape, **write_model(model_dir, shape, device)}
    log(f"model written: {result['model']}")
    batch = make_batch(args, shape["vocab_size"])
    real = int(batch["attention_mask"].sum())
    resp = int(batch["response_mask"].sum())
    lengths = batch["attention_mask"].sum(-1).tolist()
    rows = len(lengths)
    result["batch"] = {
        "rows": rows,
        "prompts": args.prompts,
        "n": args.n,
        "real_tokens": real,
        "response_tokens": resp,
        "prompt_tokens": real - resp,
        "padded_grid_tokens": rows * (args.prompt_max + args.resp_max),
        "real_fraction": real / (rows * (args.prompt_max + args.resp_max)),
        "micro_rows": args.micro,
        "token_budget": args.max_tokens,
    }
    n_nonembed = result["model"]["non_embedding_params"]
    flops_6n = 6.0 * n_nonembed * real
    result["flops"] = {"6N_real_tokens": flops_6n}
    flops_project = project_flops(flops_module, json.loads((model_dir / "config.json").read_text()), lengths, resp)
    result["flops"].update(flops_project)
    project_total = flops_project.get("project_flops")
    save()
    PROFILE["file"] = args.profile_file or os.environ.get("PROFILE_FILE") or None
    PROFILE["deadline"] = deadline
    paths = [p for p in args.paths.split(",") if p]
    path_costs: list[float] = []
    for index, path in enumerate(paths):
        left = deadline - time.perf_counter()
        # Profiles yield to the paths after this one: each of them but the last needs about what the paths so
        # far took, and the last one must still find min_path_s left to start.
        per_path = max(statistics.mean(path_costs) if path_costs else 0.0, args.min_path_s)
        after = len(paths) - index - 1
        PROFILE["reserve_s"] = (after - 1) * per_path + args.min_path_s if after else 0.0
        path_t0 = time.perf_counter()
        if left < args.min_path_s:
            result["paths"][path] = {"skipped": f"time budget: {left:.0f} s left"}
            log(f"path {path}: skipped ({left:.0f} s left)")
            save()
            continue
        CURRENT_PATH = path
        log(f"path {path}: {PATH_DOC[path]}")
        try:
            r = run_path(args, path, str(model_dir), batch, device, mesh)
            t = r["median_s"]
            r["tokens_per_s"] = real / t
            r["response_tokens_per_s"] = resp / t
            r["tflops_6N"] = flops_6n / t / 1e12
            r["mfu_6N_vs_measured"] = flops_6n / t / 1e12 / result["matmul_tflops"]
            r["mfu_6N_vs_spec989"] = flops_6n / t / 1e12 / SPEC_TFLOPS
            if isinstance(project_total, float):
                r["tflops_project"] = project_total / t / 1e12
                r["mfu_project_vs_measured"] = project_total / t / 1e12 / result["matmul_tflops"]
                r["mfu_project_vs_spec989"] = project_total / t / 1e12 / SPEC_TFLOPS
            result["paths"][path] = r
            log(
                f"path {path}: median {t:.3f} s, {r['tokens_per_s']:.0f} tok/s, "
                f"MFU(6N) {100 * r['mfu_6N_vs_measured']:.1f}% of measured, peak {r.get('peak_gb')} GB, "
                f"attention {r.get('engine', {}).get('attn_implementation')}"
            )
        except Exception as exc:  # one path's failure must not lose the others
            result["paths"][path] = {
                "error": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc()[-4000:],
            }
            log(f"path {path}: FAILED {type(exc).__name__}: {str(exc)[:500]}")
            traceback.print_exc()
        reset_peak(device)  # after the except block: the traceback's frames (and the model they hold) are gone
        path_costs.append(time.perf_counter() - path_t0)
        result["paths"][path]["path_wall_s"] = path_costs[-1]
        save()
    base = result["paths"].get("d", {}).get("median_s")
    for r in result["paths"].values():
        if base and "median_s" in r:
            r["speedup_vs_d"] = base / r["median_s"]
    save()
    log("done")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", choices=list(SHAPES), default="1.5b")
    parser.add_argument(
        "--precision", choices=["bf16", "fp32"], default="bf16", help="the project paths' (fp32 for a CPU comparison)"
    )
    parser.add_argument("--prompts", type=int, default=4, help="distinct prompts (U)")
    parser.add_argument("--n", type=int, default=8, help="samples per prompt (rows = U x n)")
    parser.add_argument("--prompt-min", type=int, default=256)
    parser.add_argument("--prompt-max", type=int, default=512)
    parser.add_argument("--resp-min", type=int, default=64)
    parser.add_argument("--resp-max", type=int, default=1024)
    parser.add_argument("--micro", type=int, default=8, help="rows per padded micro-batch")
    parser.add_argument("--max-tokens", type=int, default=16384, help="packed paths' token budget per micro-batch")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--paths", default="d,b,b0,a,c", help="in this order (the first ones if time runs short)")
    parser.add_argument("--budget-s", type=float, default=150.0, help="start no path after this many seconds")
    parser.add_argument("--min-path-s", type=float, default=20.0, help="a path needs at least this many seconds left")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--profile-file", default=None, help="append torch.profiler tables there (or PROFILE_FILE)")
    args = parser.parse_args()
    from hybridrl.testing.launch import run_ranks

    with tempfile.TemporaryDirectory() as tmp:
        args.workdir = args.workdir or tmp
        run_ranks(on_rank, 1, args, device=args.device)
    print(json.dumps(json.loads(Path(args.out).read_text()).get("paths", {}), indent=1, default=str)[:6000])


if __name__ == "__main__":
    main()
