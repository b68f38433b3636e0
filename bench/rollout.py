"""Benchmark: generated tokens per second of the hf and vllm rollout engines on the same model and prompts,
and the weight hand-over time of each. A figure, not a test.

    .venv-vllm/bin/python bench/rollout.py [--prompts 64] [--new-tokens 128] [--models small,large]

Models (random weights, Qwen2-shaped, beside the tiny character tokenizer, a 32k vocabulary as the
bench/ragged.py models):
- small: hidden 512, 6 layers, 8 heads, 2 KV heads, FFN 1536 (about 20M parameters in its layers),
- large: hidden 1024, 8 layers, 16 heads, 4 KV heads, FFN 2816 (about 90M in its layers);
the embedding and output layers add 2 x 32k x hidden (the parameter counts are printed).

Each engine generates ``--new-tokens`` tokens for each of ``--prompts`` 17-token prompts (the built-in copy
task's, sampled at temperature 1; no end-of-sequence token, so every response runs its full length), fp32,
on all of the machine's cores, in one process per model, each engine warmed up once first. Printed per
model: tokens/s of each engine (median of ``--repeats``), vllm / hf, and the median hand-over time (the
trainer's full weights into the engine: a copy for hf, vLLM's in-place reload for vllm). Needs vLLM:
``make install-vllm`` builds .venv-vllm.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

logger = logging.getLogger("bench.rollout")

VOCAB = 32768
SHAPES = {
    "small": dict(
        hidden_size=512, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2, intermediate_size=1536
    ),
    "large": dict(
        hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, intermediate_size=2816
    ),
}


def write_model(directory: Path, shape: dict[str, int]) -> str:
    """A Qwen2-shaped model with random weights and no EOS in its generation config."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from hybridrl.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=VOCAB,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=None,
        bos_token_id=None,
        **shape,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


def prompts(count: int) -> tuple[torch.Tensor, torch.Tensor]:
    from hybridrl.data.tasks import make_task
    from hybridrl.models.tiny import build_tokenizer

    task = make_task("copy", num_digits=16)
    texts = [example.prompt for example in task.examples(count, seed=0)]
    enc = build_tokenizer()(texts, padding=True, return_tensors="pt", add_special_tokens=False)
    return enc["input_ids"], enc["attention_mask"]


def measure(rank: int, world_size: int, model_path: str, args: argparse.Namespace, out: str) -> None:
    """Both engines in this (rank 0) process, the same weights, prompts and sampling."""
    from hybridrl.config.schema import RolloutConfig, SamplingConfig
    from hybridrl.generation.engines.base import EngineSite, GenerationRequest
    from hybridrl.generation.engines.hf import HFRolloutEngine
    from hybridrl.generation.engines.vllm import VLLMRolloutEngine
    from hybridrl.models.loader import load_causal_lm

    trained = load_causal_lm(model_path)  # stands in for the trainer's weights
    input_ids, attention_mask = prompts(args.prompts)
    max_len = input_ids.shape[1] + args.new_tokens
    started = time.perf_counter()
    engines = {
        "hf": HFRolloutEngine(load_causal_lm(model_path), 0, None),
        "vllm": VLLMRolloutEngine(
            RolloutConfig(max_num_seqs=args.prompts, max_num_batched_tokens=max(8192, max_len)),
            EngineSite(
                model_path=model_path,
                trust_remote_code=False,
                dtype=torch.float32,
                device=torch.device("cpu"),
                pad_token_id=0,
                eos_token_id=None,
                max_model_len=max_len,
                rank=rank,
                world_size=world_size,
            ),
        ),
    }
    figures: dict[str, dict[str, float]] = {
        "vllm": {"start_s": time.perf_counter() - started},
        "model": {"params_m": sum(p.numel() for p in trained.parameters()) / 1e6},
    }
    sampling = SamplingConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    for name, engine in engines.items():
        handovers, rates = [], []
        for repeat in range(args.repeats + 1):  # the first of each is a warm-up
            t0 = time.perf_counter()
            engine.load_weights(trained.named_parameters())
            handover = time.perf_counter() - t0
            t0 = time.perf_counter()
            result = engine.generate(
                GenerationRequest(
                    input_ids, attention_mask, max_new_tokens=args.new_tokens, sampling=sampling, seed=repeat
                )
            )
            seconds = time.perf_counter() - t0
            if repeat:
                handovers.append(handover)
                rates.append(float(result["response_mask"].sum()) / seconds)
        figures.setdefault(name, {}).update(
            tokens_per_s=statistics.median(rates),
            handover_s=statistics.median(handovers),
            tokens=float(result["response_mask"].sum()),
        )
    Path(out).write_text(json.dumps(figures))


def run_model(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, dict[str, float]]:
    """One model in a process of its own (vLLM keeps its parallel state per process)."""
    out = workdir / f"{name}.json"
    code = (
        "import sys, argparse, json; sys.path.insert(0, 'bench'); import rollout as b;"
        "from hybridrl.testing.launch import run_ranks;"
        f"args = argparse.Namespace(**json.loads({json.dumps(json.dumps(vars(args)))}));"
        f"run_ranks(b.measure, 1, b.write_model(__import__('pathlib').Path({str(workdir / name)!r}), "
        f"b.SHAPES[{name!r}]), args, {str(out)!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--models", default="small,large")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            figures = run_model(name, args, Path(tmp))
            rows.append((name, figures))
    logger.info("")
    logger.info(
        "%d prompts x %d new tokens, fp32, CPU (%d threads)", args.prompts, args.new_tokens, torch.get_num_threads()
    )
    logger.info(
        "%-6s %8s %12s %12s %8s %14s %14s %12s",
        "model",
        "params",
        "hf tok/s",
        "vllm tok/s",
        "vllm/hf",
        "hf hand-over",
        "vllm hand-over",
        "vllm start",
    )
    for name, f in rows:
        logger.info(
            "%-6s %7.0fM %12.0f %12.0f %7.2fx %13.3fs %13.3fs %11.1fs",
            name,
            f["model"]["params_m"],
            f["hf"]["tokens_per_s"],
            f["vllm"]["tokens_per_s"],
            f["vllm"]["tokens_per_s"] / f["hf"]["tokens_per_s"],
            f["hf"]["handover_s"],
            f["vllm"]["handover_s"],
            f["vllm"]["start_s"],
        )


if __name__ == "__main__":
    main()
