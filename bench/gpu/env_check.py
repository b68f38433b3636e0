"""GPU check, step env: versions, the device, the measured bf16 matmul peak, which attention kernels exist
(flash-attn, PyTorch's varlen and flex attention, the SDPA backends, transformers' registered attention
functions) and which SDPA backend accepts a packed (block-diagonal masked) attention.

    python bench/gpu/env_check.py --device cuda --out env.json
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import platform
import time
import traceback
from pathlib import Path
from typing import Any

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def matmul_tflops(device: torch.device, size: int, iters: int) -> dict[str, float]:
    """The project's own calibration (``calibrate_matmul_flops``, best of ``iters``), in TFLOP/s."""
    from hybridrl.observability.perf.device_peak import calibrate_matmul_flops

    flops = calibrate_matmul_flops(device, torch.bfloat16, size=size, repeats=iters, budget_s=5.0)
    return {"size": size, "iters": iters, "tflops": flops / 1e12}


def attention_kernels() -> dict[str, Any]:
    """Which packed-attention kernels this torch / transformers offers (found, not run: see varlen_probe.py)."""
    out: dict[str, Any] = {"flash_attn_importable": importlib.util.find_spec("flash_attn") is not None}
    try:
        from torch.nn.attention.varlen import varlen_attn

        out["torch_varlen_attn"] = str(inspect.signature(varlen_attn))
    except Exception as exc:
        out["torch_varlen_attn"] = f"absent ({error(exc)})"
    try:
        from torch.nn.attention.flex_attention import flex_attention

        out["torch_flex_attention"] = callable(flex_attention)
    except Exception as exc:
        out["torch_flex_attention"] = f"absent ({error(exc)})"
    try:  # transformers' attention functions (the project may register its own on import)
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        try:
            importlib.import_module("hybridrl.workers.actor_rollout")
        except Exception as exc:
            out["hybridrl_actor_import"] = error(exc)
        out["transformers_attention_functions"] = sorted(ALL_ATTENTION_FUNCTIONS.keys())
    except Exception as exc:
        out["transformers_attention_functions"] = error(exc)
    return out


def sdpa_probe(device: torch.device, tokens: int, heads: int, head_dim: int, rows: int) -> dict[str, Any]:
    """Forward + backward of sdpa on one packed sequence of ``rows`` equal rows with a block-diagonal causal
    bool mask (what transformers builds for packed rows without a varlen kernel), per backend that accepts it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(1, heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=True)
    k = torch.randn(1, heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=True)
    v = torch.randn(1, heads, tokens, head_dim, device=device, dtype=dtype, requires_grad=True)
    seg = torch.arange(tokens, device=device) // (tokens // rows)
    pos = torch.arange(tokens, device=device)
    mask = ((seg[:, None] == seg[None, :]) & (pos[:, None] >= pos[None, :]))[None, None]
    out: dict[str, Any] = {"tokens": tokens, "heads": heads, "head_dim": head_dim, "rows": rows, "dtype": str(dtype)}
    backends = {
        "default": None,
        "EFFICIENT_ATTENTION": SDPBackend.EFFICIENT_ATTENTION,
        "CUDNN_ATTENTION": getattr(SDPBackend, "CUDNN_ATTENTION", None),
        "FLASH_ATTENTION": SDPBackend.FLASH_ATTENTION,
        "MATH": SDPBackend.MATH,
    }

    def run(masked: bool) -> float:
        times = []
        for _ in range(3):
            sync(device)
            t0 = time.perf_counter()
            o = torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask if masked else None, is_causal=not masked
            )
            o.float().sum().backward()
            sync(device)
            times.append(time.perf_counter() - t0)
            q.grad = k.grad = v.grad = None
        return min(times[1:])

    for name, backend in backends.items():
        if name != "default" and backend is None:
            continue
        try:
            if backend is None:
                seconds = run(True)
            else:
                with sdpa_kernel([backend]):
                    seconds = run(True)
            out[name] = {"ok": True, "fwd_bwd_s": seconds}
        except Exception as exc:
            out[name] = {"ok": False, "error": error(exc)}
    try:  # the unmasked causal kernel over the same tokens: what one long row costs (flash on a GPU)
        out["causal_unmasked_default"] = {"ok": True, "fwd_bwd_s": run(False)}
    except Exception as exc:
        out["causal_unmasked_default"] = {"ok": False, "error": error(exc)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--sdpa-tokens", type=int, default=8192)
    args = parser.parse_args()
    info: dict[str, Any] = {"python": platform.python_version()}
    modules = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "tensordict", "omegaconf", "hybridrl")
    for module in modules:
        try:
            m = importlib.import_module(module)
            where = "/".join(Path(m.__file__ or "?").parts[-3:])
            info[module] = {"version": getattr(m, "__version__", None), "from": where}
        except Exception as exc:
            info[module] = {"error": error(exc)}
    for module in ("flash_attn", "ray", "vllm", "sglang", "pynvml", "accelerate", "triton"):
        info[f"{module}_importable"] = importlib.util.find_spec(module) is not None
    info["torch_cuda"] = torch.version.cuda
    info["cuda_available"] = torch.cuda.is_available()
    device = torch.device(args.device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        info["device_name"] = torch.cuda.get_device_name(0)
        info["device_capability"] = list(torch.cuda.get_device_capability(0))
        info["device_memory_gib"] = props.total_memory / 2**30
        info["device_count"] = torch.cuda.device_count()
        info["allow_tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        info["sdp_enabled"] = {
            "flash": torch.backends.cuda.flash_sdp_enabled(),
            "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
            "math": torch.backends.cuda.math_sdp_enabled(),
            "cudnn": getattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: None)(),
        }
        try:
            import torch.distributed as dist

            info["nccl_available"] = dist.is_nccl_available()
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            info["nccl_available"] = error(exc)
    try:
        from hybridrl.observability.perf.device_peak import lookup_gpu_peak

        if device.type == "cuda":
            info["project_peak_table"] = lookup_gpu_peak(info["device_name"], torch.bfloat16)
    except Exception as exc:
        info["project_peak_table"] = error(exc)
    info["attention_kernels"] = attention_kernels()
    size = args.size if device.type == "cuda" else 512
    info["matmul_bf16"] = matmul_tflops(device, size, args.iters)
    print(f"bf16 matmul {size}^3 x {args.iters}: {info['matmul_bf16']['tflops']:.1f} TFLOP/s", flush=True)
    try:
        tokens = args.sdpa_tokens if device.type == "cuda" else 256
        info["sdpa_packed_probe"] = sdpa_probe(device, tokens, heads=12, head_dim=128, rows=8)
    except Exception:
        info["sdpa_packed_probe"] = {"error": traceback.format_exc()[-2000:]}
    Path(args.out).write_text(json.dumps(info, indent=1, default=str))
    print(json.dumps(info, indent=1, default=str))


if __name__ == "__main__":
    main()
