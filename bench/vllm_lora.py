"""vLLM with a LoRA actor: merged weights against vLLM's own LoRA (a ``LoRARequest``), which one is exact and
which is faster, on this machine (issue #29, item 4). Run in the vLLM virtualenv:

    .venv-vllm/bin/python bench/vllm_lora.py            # ~1 min on 2 CPU cores

Both modes start from the same base and the same trained adapters (B not zero, so they matter) and generate
the same prompts with the same seeds; each runs in a process of its own (one vLLM engine per process):
- ``merged``: what hybridrl's hand-over does for every engine: ``W + alpha/r * B @ A`` layer by layer in fp32
  (``hybridrl.models.lora.merged_weights``), loaded with vLLM's in-place ``reload_weights``.
- ``lora``: the adapters alone, written as a PEFT adapter directory and served by vLLM's LoRA layers
  (``enable_lora``): a new adapter id per update, as a trainer would send one per step.
Each prints the hand-over time, the first generation after it (for ``lora`` this loads the adapter), a second
generation on the same weights ("again": vLLM's LoRA kernels alone) and its tokens' log-probs; the report
compares each mode's log-probs with the trainer's (a transformers fp32 forward of the adapted model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import vllm
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM
from vllm.lora.request import LoRARequest

from hybridrl.models.lora import merged_weights, uniform_scalings
from hybridrl.models.tiny import ensure_tiny_model

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in-process, as hybridrl's engine: weights without a copy

ROWS, PROMPT, NEW = 64, 12, 24


def build(root: Path, rank: int) -> tuple[str, str]:
    """The base model (heads of 64 dimensions: vLLM's CPU attention takes 32 and up) and a PEFT adapter
    directory whose B is not zero."""
    base = ensure_tiny_model(
        root / "base",
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=512,
        seed=0,
    )
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
        LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", lora_dropout=0.0),
    )
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # a trained adapter: B moved away from its zero start
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    adapter = root / "adapter"
    model.save_pretrained(adapter)
    return str(base), str(adapter)


def prompts() -> list[list[int]]:
    generator = torch.Generator().manual_seed(2)
    return torch.randint(3, 17, (ROWS, PROMPT), generator=generator).tolist()


def run_mode(mode: str, base: str, adapter: str, rank: int) -> dict:
    """One vLLM engine in this process; the hand-over and generation timed, the log-probs returned."""
    lora = mode == "lora"
    llm = vllm.LLM(
        model=base,
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=PROMPT + NEW,
        max_num_seqs=ROWS,
        enforce_eager=True,
        enable_prefix_caching=False,
        logprobs_mode="processed_logprobs",
        disable_log_stats=True,
        kv_cache_memory_bytes=64 << 20,
        enable_lora=lora,
        max_lora_rank=rank if lora else 16,
        max_loras=1,
    )
    params = [
        vllm.SamplingParams(seed=i, temperature=1.0, max_tokens=NEW, ignore_eos=True, logprobs=0) for i in range(ROWS)
    ]
    inputs = [vllm.inputs.TokensPrompt(prompt_token_ids=ids) for ids in prompts()]
    state = adapted_state(base, adapter)  # what the trainer holds (in memory: not timed)
    scaling = uniform_scalings(LoraConfig.from_pretrained(adapter))
    handover, generate, again, outputs = [], [], [], None
    for update in range(1, 4):  # three "steps": the first is warm-up, the figures are the last two
        start = time.perf_counter()
        if lora:
            request = LoRARequest(f"step{update}", update, adapter)  # a new id: vLLM loads it afresh
        else:
            request = None
            weights = merged_weights(state.items(), scaling)
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        middle = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False, lora_request=request)
        end = time.perf_counter()
        llm.generate(inputs, params, use_tqdm=False, lora_request=request)  # again: the adapter loaded
        again.append(time.perf_counter() - end)
        handover.append(middle - start)
        generate.append(end - middle)
    assert outputs is not None
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    logprobs = [[step[t].logprob for step, t in zip(o.outputs[0].logprobs, ids)] for o, ids in zip(outputs, tokens)]
    return {
        "mode": mode,
        "handover_s": sum(handover[1:]) / 2,
        "generate_s": sum(generate[1:]) / 2,
        "again_s": sum(again[1:]) / 2,
        "tokens": tokens,
        "logprobs": logprobs,
    }


def peft_model(base: str, adapter: str) -> PeftModel:
    return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)


def adapted_state(base: str, adapter: str) -> dict[str, torch.Tensor]:
    """The adapted model's tensors under hybridrl's names (``<layer>.base_layer.weight`` beside
    ``<layer>.lora_A.default.weight``), in the model's order: what the trainer streams to the merge."""
    return {k.removeprefix("base_model.model."): v for k, v in peft_model(base, adapter).state_dict().items()}


def trainer_logprobs(base: str, adapter: str, tokens: list[list[int]]) -> torch.Tensor:
    """The trainer's log-probs of the sampled tokens: the PEFT model in fp32, one forward."""
    model = peft_model(base, adapter)
    ids = torch.cat([torch.tensor(prompts()), torch.tensor(tokens)], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, PROMPT - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--child", nargs=3, metavar=("MODE", "BASE", "ADAPTER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_mode(args.child[0], args.child[1], args.child[2], args.rank)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        base, adapter = build(Path(tmp), args.rank)
        results = {}
        for mode in ("merged", "lora"):
            cmd = [sys.executable, __file__, "--rank", str(args.rank), "--child", mode, base, adapter]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
            results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"vLLM with LoRA rank {args.rank} adapters ({ROWS} prompts x {NEW} tokens, fp32, CPU):")
        print(f"{'mode':<8} {'hand-over s':>12} {'generate s':>11} {'again s':>8} {'max |logp - trainer|':>22}")
        for mode, r in results.items():
            gap = (torch.tensor(r["logprobs"]) - trainer_logprobs(base, adapter, r["tokens"])).abs().max()
            print(
                f"{mode:<8} {r['handover_s']:>12.3f} {r['generate_s']:>11.3f} {r['again_s']:>8.3f} {float(gap):>22.2e}"
            )
        same = results["merged"]["tokens"] == results["lora"]["tokens"]
        between = (torch.tensor(results["merged"]["logprobs"]) - torch.tensor(results["lora"]["logprobs"])).abs().max()
        print(f"same tokens sampled in both modes: {same}; max |logp merged - logp lora| {float(between):.2e}")


if __name__ == "__main__":
    main()
