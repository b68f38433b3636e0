"""A tiny saved Llama with a character tokenizer, and verl-format gsm8k parquet made by the example's own
preprocessing script: what the gsm8k example test and the verl quickstart test run on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.data.char_tokenizer import build_char_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def tiny_llama(directory: Path, hidden_size: int = 32, num_attention_heads: int = 4) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def fixture_parquet(directory: Path, script: str = "gsm8k") -> tuple[Path, Path]:
    """8 training and 4 test rows written by ``examples/data_preprocess/<script>.py`` (gsm8k, or
    gsm8k_tool_agent for multi-turn rollouts with verl's gsm8k tool)."""
    rows = [
        {"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
        for a, b in [(1, 2), (3, 4), (5, 1), (2, 2), (7, 1), (0, 9), (4, 4), (6, 3)]
    ]
    for split, chunk in (("train", rows), ("test", rows[:4])):
        src = directory / f"{split}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in chunk))
        subprocess.run(
            [
                sys.executable,
                str(ROOT / f"examples/data_preprocess/{script}.py"),
                "--input",
                str(src),
                "--split-name",
                split,
                "--output-dir",
                str(directory / script),
            ],
            check=True,
        )
    return directory / script / "train.parquet", directory / script / "test.parquet"
