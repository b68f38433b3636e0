"""GPU check, step gen: hybridrl's hf rollout engine against plain ``model.generate``, same weights and sampling.

A Qwen2-shaped model with random weights in bf16 stands in for the trainer's weights; the engine is built as
the actor's worker builds it (``build_rollout_engine`` from a default ``RolloutConfig``, empty, then filled by
``load_weights``), and generates ``--prompts`` left-padded prompts x ``--new-tokens`` sampled tokens (no EOS in
the config, so every row runs its full length). The baseline calls ``generate`` on the source model with
the sampling arguments the engine passes. Scenarios: distinct prompts, and GRPO's layout (prompts / n
distinct prompts, n samples each: the engine may prefill each distinct prompt once). Reported: tokens/s (median
of the timed runs), ms per decode step, and the decode memory-bandwidth bound (bf16 weight bytes / HBM
bandwidth per step) for context.

With --profile-file (or PROFILE_FILE), one more call per engine in --profile-scenario (32 new tokens) runs
under torch.profiler, its top-20 operators by self device time appended to that file, if the time allows.

    python bench/gpu/gen_bench.py --device cuda --shape 1.5b --out gen.json [--profile-file profile.txt]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_bench
from train_bench import SHAPES, dtype_kwarg, profile_one

HBM_BYTES_PER_S = 4.8e12  # H200


def log(msg: str) -> None:
    print(f"[gen_bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def prompts(
    count: int, distinct: int, p_min: int, p_max: int, vocab: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` left-padded rows: ``distinct`` prompts, each repeated count // distinct times, adjacent."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, p_max), dtype=np.int64)
    mask = np.zeros((count, p_max), dtype=np.int64)
    per = count // distinct
    for u in range(distinct):
        plen = int(rng.integers(p_min, p_max + 1))
        prompt = rng.integers(3, vocab, size=plen)
        for j in range(per):
            ids[u * per + j, p_max - plen :] = prompt
            mask[u * per + j, p_max - plen :] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--shape", choices=list(SHAPES), default="1.5b")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8, help="GRPO scenario: samples per distinct prompt")
    parser.add_argument("--prompt-min", type=int, default=128)
    parser.add_argument("--prompt-max", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed runs per engine and scenario (after a short warm-up)"
    )
    parser.add_argument("--scenarios", default="distinct,grpo")
    parser.add_argument("--budget-s", type=float, default=50.0, help="start no measurement after this many seconds")
    parser.add_argument("--profile-file", default=None, help="append torch.profiler tables there (or PROFILE_FILE)")
    parser.add_argument("--profile-scenario", default="grpo", help="the scenario whose calls are profiled")
    parser.add_argument("--profile-tokens", type=int, default=32, help="new tokens of the profiled call")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    started = time.perf_counter()
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config

    from hybridrl.config.schema import RolloutConfig, SamplingConfig
    from hybridrl.generation.engines.base import EngineSite, GenerationRequest
    from hybridrl.generation.engines.factory import build_rollout_engine

    device = torch.device(args.device)
    dtype = torch.bfloat16
    shape = SHAPES[args.shape]
    pad = 0
    result: dict[str, Any] = {"args": vars(args), "scenarios": {}}
    out = Path(args.out)
    deadline = started + args.budget_s
    profile_file = args.profile_file or os.environ.get("PROFILE_FILE") or None
    train_bench.PROFILE.update(file=profile_file, deadline=deadline, reserve_s=0.0)

    def save() -> None:
        result["elapsed_s"] = time.perf_counter() - started
        tmp_out = out.with_suffix(".tmp")
        tmp_out.write_text(json.dumps(result, indent=1, default=str))
        tmp_out.replace(out)  # whole, even if the step is killed while writing

    with tempfile.TemporaryDirectory() as tmp:
        config = Qwen2Config(
            **shape,
            tie_word_embeddings=True,
            max_position_embeddings=32768,
            pad_token_id=pad,
            bos_token_id=None,
            eos_token_id=None,
        )
        config.save_pretrained(tmp)  # the engine builds its empty model from the directory's config
        GenerationConfig(pad_token_id=pad).save_pretrained(tmp)
        torch.manual_seed(0)
        with torch.device(device):
            source = AutoModelForCausalLM.from_config(config, **dtype_kwarg(dtype), attn_implementation="sdpa")
        source.eval().requires_grad_(False)
        source.generation_config = GenerationConfig(pad_token_id=pad)
        weight_bytes = sum(p.numel() * p.element_size() for p in source.parameters())
        step_bound_s = weight_bytes / HBM_BYTES_PER_S
        result["model"] = {
            "shape_name": args.shape,
            **shape,
            "params": sum(p.numel() for p in source.parameters()),
            "weight_bytes_bf16": weight_bytes,
            "decode_step_bound_ms": 1e3 * step_bound_s,
            "attn_implementation": source.config._attn_implementation,
        }
        t0 = time.perf_counter()
        build_kwargs: dict[str, Any] = dict(
            model_path=tmp,
            trust_remote_code=False,
            dtype=dtype,
            device=device,
            pad_token_id=pad,
            eos_token_id=None,
            max_model_len=args.prompt_max + args.new_tokens,
            rank=0,
            world_size=1,
            seed=0,
        )
        engine = build_rollout_engine(RolloutConfig(), EngineSite(**build_kwargs))
        engine.load_weights(source.named_parameters())
        # The GPU mode (rollout.enforce_eager=false: static cache, generate compiles the decode step), CUDA only.
        compiled = None
        if device.type == "cuda":
            compiled = build_rollout_engine(RolloutConfig(enforce_eager=False), EngineSite(**build_kwargs))
            compiled.load_weights(source.named_parameters())
        sync(device)
        engine_model = getattr(engine, "model", None)
        rows_per_call = getattr(engine, "rows_per_call", None)
        result["engine"] = {
            "class": type(engine).__name__,
            "build_and_handover_s": time.perf_counter() - t0,
            "rows_per_generate_call": rows_per_call(args.prompt_max, args.new_tokens, args.prompts)
            if callable(rows_per_call)
            else None,
            "attn_implementation": getattr(getattr(engine_model, "config", None), "_attn_implementation", None),
        }
        log(f"model {result['model']}, engine {result['engine']}")
        sampling = SamplingConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)

        def run_engine(ids: torch.Tensor, mask: torch.Tensor, seed: int, new_tokens: int) -> int:
            res = engine.generate(GenerationRequest(ids, mask, new_tokens, sampling, seed))
            return int(res["response_mask"].sum())

        def run_compiled(ids: torch.Tensor, mask: torch.Tensor, seed: int, new_tokens: int) -> int:
            assert compiled is not None
            res = compiled.generate(GenerationRequest(ids, mask, new_tokens, sampling, seed))
            return int(res["response_mask"].sum())

        def run_plain(ids: torch.Tensor, mask: torch.Tensor, seed: int, new_tokens: int) -> int:
            torch.manual_seed(seed)
            with torch.no_grad():
                res = source.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=new_tokens,
                    min_new_tokens=0,
                    pad_token_id=pad,
                    eos_token_id=None,
                    use_cache=True,
                    do_sample=True,
                    temperature=1.0,
                    top_k=None,  # what the engine passes for top_k=0
                    top_p=1.0,
                )
            return int((res.shape[1] - ids.shape[1]) * res.shape[0])

        engines: tuple[tuple[str, Callable[[torch.Tensor, torch.Tensor, int, int], int]], ...] = (
            ("hybridrl_hf_engine", run_engine),
            ("plain_generate", run_plain),
        )
        if compiled is not None:
            engines += (("hybridrl_hf_engine_compiled", run_compiled),)
        for scenario in args.scenarios.split(","):
            distinct = args.prompts if scenario == "distinct" else max(1, args.prompts // args.n)
            ids, mask = prompts(args.prompts, distinct, args.prompt_min, args.prompt_max, shape["vocab_size"], seed=1)
            ids, mask = ids.to(device), mask.to(device)
            entry: dict[str, Any] = {
                "rows": args.prompts,
                "distinct_prompts": distinct,
                "prompt_tokens": int(mask.sum()),
            }
            result["scenarios"][scenario] = entry
            # Both engines warm up first, then timed rounds alternate which goes first: the first CUDA
            # work of a process (allocator growth, kernel loading) must not land on one engine only.
            runs: dict[str, list[float]] = {name: [] for name, _ in engines}
            failed: dict[str, dict[str, Any]] = {}
            token_counts: dict[str, int] = {}
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            for repeat in range(args.repeats + 1):  # run 0: a short warm-up of each
                order = engines if repeat % 2 else engines[::-1]
                for name, fn in order:
                    if name in failed:
                        continue
                    if repeat and deadline - time.perf_counter() < 8:
                        break
                    try:
                        sync(device)
                        t0 = time.perf_counter()
                        new_tokens = args.new_tokens if repeat else min(16, args.new_tokens)
                        token_counts[name] = fn(ids, mask, repeat, new_tokens)
                        sync(device)
                        s = time.perf_counter() - t0
                        log(f"{scenario} {name} run {repeat}: {token_counts[name]} tokens in {s:.2f} s")
                        if repeat:
                            runs[name].append(s)
                    except Exception as exc:
                        failed[name] = {
                            "error": f"{type(exc).__name__}: {exc}"[:2000],
                            "traceback": traceback.format_exc()[-3000:],
                        }
                        log(f"{scenario} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}")
            for index, (name, fn) in enumerate(engines):
                if name in failed:
                    entry[name] = failed[name]
                    continue
                if not runs[name]:
                    entry[name] = {"skipped": "time budget"}
                    continue
                median_s = statistics.median(runs[name])
                entry[name] = {
                    "timed_runs": len(runs[name]),
                    "tokens": token_counts[name],
                    "median_s": median_s,
                    "tokens_per_s": token_counts[name] / median_s,
                    "ms_per_decode_step": 1e3 * median_s / args.new_tokens,
                    "bound_tokens_per_s": args.prompts / step_bound_s,
                    "peak_gb_both": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
                }
                if scenario == args.profile_scenario and profile_file:
                    still = len(engines) - index - 1
                    train_bench.PROFILE["reserve_s"] = still * 8.0
                    estimate = median_s * min(1.0, args.profile_tokens / args.new_tokens)
                    tokens_p = args.profile_tokens

                    def profiled(
                        fn: Callable[..., int] = fn,
                        ids: torch.Tensor = ids,
                        mask: torch.Tensor = mask,
                        tokens_p: int = tokens_p,
                    ) -> int:
                        return fn(ids, mask, 9, tokens_p)

                    entry[name]["profiled"] = profile_one(
                        profiled, device, f"generate {scenario} {name}, {tokens_p} new tokens", estimate
                    )
                gc.collect()
                save()
            e, p = entry.get("hybridrl_hf_engine", {}), entry.get("plain_generate", {})
            if "tokens_per_s" in e and "tokens_per_s" in p:
                entry["engine_over_plain"] = e["tokens_per_s"] / p["tokens_per_s"]
            c = entry.get("hybridrl_hf_engine_compiled", {})
            if "tokens_per_s" in c and "tokens_per_s" in p:
                entry["compiled_over_plain"] = c["tokens_per_s"] / p["tokens_per_s"]
            save()
    save()
    print(json.dumps(result, indent=1, default=str)[:4000])


if __name__ == "__main__":
    main()
