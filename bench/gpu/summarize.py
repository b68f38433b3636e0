"""GPU check, last step: every step's outputs into one results.json and a markdown summary.md (in $OUT).

python bench/gpu/summarize.py --work WORK --out OUT
"""

from __future__ import annotations

import argparse
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any


def load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except Exception as exc:
        return {"missing": f"{path.name}: {type(exc).__name__}: {exc}"}


def junit(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"missing": path.name}
    cases: dict[str, dict[str, Any]] = {}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return {"missing": f"{path.name}: {exc}"}
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = "passed"
        detail = ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                detail = (child.get("message") or "")[:300]
        cases[name] = {
            "outcome": outcome,
            "time_s": float(case.get("time") or 0),
            **({"detail": detail} if detail else {}),
        }
    counts: dict[str, int] = {}
    for c in cases.values():
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    return {"counts": counts, "cases": cases}


def memory_table(log: Path) -> dict[str, Any]:
    """bench/memory.py's table: ``algo workers rank phase peak_GB model_GB ratio`` per line, then the worst ratio."""
    if not log.exists():
        return {"missing": log.name}
    rows = []
    pattern = re.compile(r"^(ppo|grpo)\s+(\d+)\s+(\d+)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
    worst = None
    model = None
    for line in log.read_text(errors="replace").splitlines():
        m = pattern.match(line.strip())
        if m:
            rows.append(
                {
                    "algo": m[1],
                    "workers": int(m[2]),
                    "rank": int(m[3]),
                    "phase": m[4],
                    "peak_gb": float(m[5]),
                    "model_gb": float(m[6]),
                    "ratio": float(m[7]),
                }
            )
        if "largest measured/predicted" in line:
            worst = line.strip()
        if line.startswith("model:"):
            model = line.strip()
    return {"rows": rows, "worst": worst, "model": model}


def fmt(x: Any, spec: str = ".1f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "-"


def cell(x: Any, limit: int = 160) -> str:
    return str(x).replace("|", "/").replace("\n", " ")[:limit]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def env_lines(env: Any) -> list[str]:
    if not isinstance(env, dict) or "missing" in env:
        return [f"env: {cell(env, 400)}"]
    ver = {k: (env.get(k) or {}).get("version") or (env.get(k) or {}).get("error") for k in ("torch", "transformers")}
    lines = [
        f"- device: {env.get('device_name', 'cpu')} ({fmt(env.get('device_memory_gib'), '.0f')} GiB); "
        f"torch {ver['torch']} (CUDA {env.get('torch_cuda')}), transformers {ver['transformers']}, "
        f"python {env.get('python')}",
        f"- missing packages from the wheels: omegaconf {cell((env.get('omegaconf') or {}).get('version'))}, "
        f"tensordict {cell((env.get('tensordict') or {}).get('version'))}; hybridrl from "
        f"{cell((env.get('hybridrl') or {}).get('from') or (env.get('hybridrl') or {}).get('error'))}",
    ]
    mm = env.get("matmul_bf16") or {}
    lines.append(
        f"- bf16 matmul {mm.get('size')}^3: {fmt(mm.get('tflops'))} TFLOP/s measured "
        f"(project peak table: {cell(env.get('project_peak_table'))}; spec 989)"
    )
    kernels = env.get("attention_kernels") or {}
    if kernels:
        lines.append(
            f"- attention kernels: flash-attn importable {kernels.get('flash_attn_importable')}; torch varlen_attn "
            f"{'present' if not str(kernels.get('torch_varlen_attn', 'absent')).startswith('absent') else 'absent'}; "
            f"flex_attention {kernels.get('torch_flex_attention')}; transformers registered: "
            f"{cell(kernels.get('transformers_attention_functions'), 300)}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    work, out = Path(args.work), Path(args.out)
    steps = []
    steps_file = work / "steps.txt"
    if steps_file.exists():
        for line in steps_file.read_text().splitlines():
            steps.append(dict(p.split("=", 1) for p in line.split() if "=" in p))
    marker = work / "gpu-marker-summary.txt"
    results = {
        "steps": steps,
        "env": load(work / "env.json"),
        "probe": load(work / "probe.json"),
        "tests": {
            "cuda_related": junit(work / "junit-cuda.xml"),
            "gpu_marker_summary": marker.read_text()[-3000:] if marker.exists() else None,
        },
        "memory": memory_table(out / "memory.log"),
        "train": load(work / "train.json"),
        "gen": load(work / "gen.json"),
    }
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))

    lines = ["# hybridrl GPU check", ""]
    lines += env_lines(results["env"])
    t = results["tests"]["cuda_related"]
    lines.append(f"- tests touching CUDA: {t.get('counts', t)}")
    for name, c in t.get("cases", {}).items():
        if c["outcome"] in ("failed", "error"):
            lines.append(f"  - {c['outcome']}: {name}: {cell(c.get('detail', ''), 200)}")
    if results["tests"]["gpu_marker_summary"]:
        lines.append(f"- tests marked gpu (collected only): {cell(results['tests']['gpu_marker_summary'], 300)}")

    # (i) training
    lines += ["", "## Training: one GRPO actor update", ""]
    tr = results["train"]
    if isinstance(tr, dict) and "paths" in tr:
        b, m = tr.get("batch", {}), tr.get("model", {})
        lines.append(
            f"{m.get('shape_name')} shape, {fmt(m.get('params', 0) / 1e9, '.2f')}B params "
            f"({fmt(m.get('non_embedding_params', 0) / 1e9, '.2f')}B non-embedding); {b.get('rows')} rows "
            f"({b.get('prompts')} prompts x {b.get('n')}), {b.get('real_tokens')} real tokens "
            f"({fmt(100 * b.get('real_fraction', 0), '.0f')}% of the padded grid); measured bf16 peak "
            f"{fmt(tr.get('matmul_tflops'))} TFLOP/s."
        )
        lines.append("")
        rows = []
        for name, r in tr["paths"].items():
            eng = r.get("engine", {})
            if "median_s" in r:
                rows.append(
                    [
                        name,
                        fmt(r["median_s"], ".3f"),
                        fmt(r.get("tokens_per_s"), ",.0f"),
                        pct(r.get("mfu_6N_vs_measured")),
                        pct(r.get("mfu_project_vs_measured")),
                        fmt(r.get("peak_gb")),
                        fmt(r.get("speedup_vs_d"), ".2f"),
                        str(eng.get("attn_implementation")),
                        str(eng.get("share_prompts", "-")),
                        str(r.get("micro_batches")),
                    ]
                )
            else:
                rows.append([name, cell(r.get("error") or r.get("skipped"), 200)] + ["-"] * 8)
        lines += table(
            [
                "path",
                "s/update",
                "tokens/s",
                "MFU (6N of measured peak)",
                "MFU (FlopsModel of measured)",
                "peak GB",
                "vs plain loop",
                "attention impl",
                "shared prompts",
                "micro-batches",
            ],
            rows,
        )
        lines.append("")
        for name, doc in tr.get("path_doc", {}).items():
            if name in tr["paths"]:
                lines.append(f"- {name}: {doc}")
        for name, r in tr["paths"].items():
            if r.get("out_of_memory_first"):
                lines.append(f"- {name} ran out of GPU memory first ({r['out_of_memory_first']}): figures at half that")
        if tr.get("note"):
            lines.append(f"- note: {tr['note']}")
    else:
        lines.append(f"train: {cell(tr, 400)}")

    # (ii) generation
    lines += ["", "## Generation: hf engine vs plain generate", ""]
    gen = results["gen"]
    if isinstance(gen, dict) and "scenarios" in gen:
        gm, ga = gen.get("model", {}), gen.get("args", {})
        lines.append(
            f"{gm.get('shape_name')} shape, bf16, {ga.get('prompts')} rows x {ga.get('new_tokens')} new tokens; "
            f"decode bound {fmt(gm.get('decode_step_bound_ms'), '.3f')} ms/step (weights / HBM bandwidth); engine "
            f"{cell((gen.get('engine') or {}).get('class'))}, attention "
            f"{cell((gen.get('engine') or {}).get('attn_implementation'))}."
        )
        lines.append("")
        rows = []
        for sc, e in gen["scenarios"].items():
            eng, plain = e.get("hybridrl_hf_engine", {}), e.get("plain_generate", {})
            comp = e.get("hybridrl_hf_engine_compiled", {})

            def rate(r: dict[str, Any]) -> str:
                return (
                    fmt(r["tokens_per_s"], ",.0f")
                    if "tokens_per_s" in r
                    else cell(r.get("error") or r.get("skipped"), 80)
                )

            rows.append(
                [
                    f"{sc} ({e.get('distinct_prompts')} distinct)",
                    rate(eng),
                    rate(plain),
                    fmt(e.get("engine_over_plain"), ".2f"),
                    rate(comp) if comp else "-",
                    fmt(e.get("compiled_over_plain"), ".2f"),
                    f"{fmt(eng.get('ms_per_decode_step'), '.2f')} / {fmt(plain.get('ms_per_decode_step'), '.2f')}",
                ]
            )
        lines += table(
            [
                "scenario",
                "engine tok/s",
                "plain tok/s",
                "ratio",
                "compiled engine tok/s (enforce_eager=false)",
                "ratio",
                "ms/step (engine / plain)",
            ],
            rows,
        )
    else:
        lines.append(f"gen: {cell(gen, 400)}")

    # (iii) memory
    lines += ["", "## Memory: bench/memory.py, model vs measured", ""]
    mem = results["memory"]
    if mem.get("rows"):
        if mem.get("model"):
            lines += [mem["model"], ""]
        lines += table(
            ["algo", "workers", "rank", "phase", "measured GB", "model GB", "measured / model"],
            [
                [
                    r["algo"],
                    str(r["workers"]),
                    str(r["rank"]),
                    r["phase"],
                    fmt(r["peak_gb"], ".2f"),
                    fmt(r["model_gb"], ".2f"),
                    fmt(r["ratio"], ".2f"),
                ]
                for r in mem["rows"]
            ],
        )
        lines += ["", f"{mem.get('worst')}"]
    else:
        lines.append(f"memory: no table ({cell(mem, 300)})")

    # (iv) packed attention
    lines += ["", "## Packed attention probe (fwd+bwd)", ""]
    probe = results["probe"]
    if isinstance(probe, dict) and "kernels" in probe:
        lines.append(
            f"{probe.get('tokens')} tokens in {probe.get('documents')} documents, {probe.get('heads')} heads x "
            f"{probe.get('head_dim')}, {probe.get('dtype')} on {probe.get('device')}"
        )
        lines.append("")
        lines += table(
            ["kernel", "ms"],
            [
                [k, fmt(v.get("fwd_bwd_ms"), ".2f") if v.get("ok") else f"failed: {cell(v.get('error'), 120)}"]
                for k, v in probe["kernels"].items()
            ],
        )
    else:
        lines.append(f"probe: {cell(probe, 300)}")
    env = results["env"]
    sdpa = env.get("sdpa_packed_probe", {}) if isinstance(env, dict) else {}
    if isinstance(sdpa, dict) and "tokens" in sdpa:
        parts = [
            f"{k} {fmt(1e3 * v['fwd_bwd_s'], '.2f')} ms" if v.get("ok") else f"{k} refused"
            for k, v in sdpa.items()
            if isinstance(v, dict)
        ]
        lines += [
            "",
            f"SDPA backends on a block-diagonal mask ({sdpa['tokens']} tokens, {sdpa['rows']} rows): "
            + ", ".join(parts),
        ]

    # (v) steps
    lines += ["", "## Steps", ""]
    lines += table(
        ["step", "rc", "elapsed s", "limit s"],
        [[s.get("step", "?"), s.get("rc", "?"), s.get("elapsed_s", "?"), s.get("limit_s", "?")] for s in steps],
    )
    profile = out / "profile.txt"
    if profile.exists():
        titles = [ln.strip("= \n") for ln in profile.read_text(errors="replace").splitlines() if ln.startswith("=====")]
        lines += ["", "## Profiles (profile.txt)", ""] + [f"- {cell(t, 200)}" for t in titles]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
