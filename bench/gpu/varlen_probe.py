"""Packed attention on one device, forward + backward: a dense block-diagonal mask (what packed rows cost without a
variable-length kernel), causal attention without a mask (the T^2/2 bound of one long row), a loop over the
documents, PyTorch's own ``varlen_attn`` and, with --flex, FlexAttention with a document block mask (its
compilation takes tens of seconds, so it is off by default). About 10 s on an H200.

    python bench/gpu/varlen_probe.py [--tokens 16384] [--out probe.json] [--flex]
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=None, help="default: 16384 on a GPU, 1024 on the CPU")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--flex", action="store_true", help="also FlexAttention (compiles: slow to start)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    T = args.tokens or (16384 if dev == "cuda" else 1024)
    H, D = args.heads, args.head_dim
    g = torch.Generator().manual_seed(0)
    lens: list[int] = []
    while sum(lens) < T:
        lens.append(int(torch.randint(T // 50, T // 10, (1,), generator=g)))
    lens[-1] -= sum(lens) - T
    lens = [x for x in lens if x > 0]
    cu = torch.tensor([0, *lens], device=dev).cumsum(0).to(torch.int32)
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    q, k, v = (torch.randn(T, H, D, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "device": dev,
        "tokens": T,
        "documents": len(lens),
        "heads": H,
        "head_dim": D,
        "dtype": str(dt),
        "kernels": {},
    }
    print(f"varlen probe: torch {torch.__version__} {dev} T={T} docs={len(lens)} heads={H} dim={D}", flush=True)

    def sync() -> None:
        if dev == "cuda":
            torch.cuda.synchronize()

    def bench(name: str, fn: Callable[[], torch.Tensor]) -> None:
        try:
            for _ in range(2):
                fn().float().sum().backward()
            sync()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn().float().sum().backward()
            sync()
            ms = 1e3 * (time.perf_counter() - t0) / args.iters
            result["kernels"][name] = {"ok": True, "fwd_bwd_ms": ms}
            print(f"probe {name:36s} {ms:8.2f} ms fwd+bwd", flush=True)
        except Exception as exc:
            result["kernels"][name] = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            print(f"probe {name:36s} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        finally:
            q.grad = k.grad = v.grad = None

    def heads_first(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(0, 1)[None]  # (T, H, D) -> (1, H, T, D)

    doc = torch.repeat_interleave(torch.arange(len(lens), device=dev), torch.tensor(lens, device=dev))
    pos = torch.arange(T, device=dev)
    mask = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
    bench(
        "sdpa dense block-diagonal mask",
        lambda: F.scaled_dot_product_attention(
            heads_first(q), heads_first(k), heads_first(v), attn_mask=mask[None, None]
        ),
    )
    bench(
        "sdpa causal, no mask (T^2/2 bound)",
        lambda: F.scaled_dot_product_attention(heads_first(q), heads_first(k), heads_first(v), is_causal=True),
    )
    bounds = list(zip(cu[:-1].tolist(), cu[1:].tolist()))

    def per_doc() -> torch.Tensor:
        outs = [
            F.scaled_dot_product_attention(
                heads_first(q[a:b]), heads_first(k[a:b]), heads_first(v[a:b]), is_causal=True
            )[0]
            for a, b in bounds
        ]
        return torch.cat(outs, -2)

    bench("sdpa per-document loop", per_doc)
    try:
        from torch.nn.attention.varlen import varlen_attn

        m = max(lens)
        params = inspect.signature(varlen_attn).parameters
        # torch 2.11 takes causal as window_size=(-1, 0); other versions as is_causal=True
        causal: dict[str, Any] = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        result["varlen_attn_signature"] = str(inspect.signature(varlen_attn))

        def varlen() -> torch.Tensor:
            out = varlen_attn(q, k, v, cu, cu, m, m, **causal)
            return out[0] if isinstance(out, tuple) else out

        bench("torch varlen_attn", varlen)
    except ImportError as exc:
        result["kernels"]["torch varlen_attn"] = {"ok": False, "error": f"not in this torch: {exc}"}
        print(f"probe {'torch varlen_attn':36s} not in this torch: {exc}", flush=True)
    # The project's own function on grouped-query heads (Qwen2.5-1.5B's 12 query / 2 KV heads): the
    # kernel it picks on this device, with K/V grouped natively where the kernel takes them.
    try:
        from hybridrl.models.packed_attention import Documents, packed_documents

        kv_heads = 2 if H % 2 == 0 else 1
        kg, vg = (torch.randn(T, kv_heads, D, device=dev, dtype=dt, requires_grad=True) for _ in range(2))
        docs = Documents.from_lengths(lens, torch.device(dev))
        bench(f"hybridrl packed_documents ({H}q/{kv_heads}kv)", lambda: packed_documents(q, kg, vg, docs))
    except ImportError as exc:
        print(f"probe hybridrl packed_documents: {exc}", flush=True)
    if args.flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            def doc_causal(b: Any, h: Any, qi: torch.Tensor, ki: torch.Tensor) -> torch.Tensor:
                return (doc[qi] == doc[ki]) & (qi >= ki)

            block_mask = create_block_mask(doc_causal, None, None, T, T, device=dev)
            flex = torch.compile(flex_attention)
            bench(
                "flex_attention document block mask",
                lambda: flex(heads_first(q), heads_first(k), heads_first(v), block_mask=block_mask),  # type: ignore[return-value]
            )
        except Exception as exc:
            print(f"probe flex_attention FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
