#!/usr/bin/env python
"""Convert GSM8K (``openai/gsm8k``, config ``main``) to verl-format parquet.

    python examples/data_preprocess/gsm8k.py --input gsm8k_train.jsonl --split-name train --output-dir data/gsm8k
    python examples/data_preprocess/gsm8k.py --input gsm8k_test.jsonl  --split-name test  --output-dir data/gsm8k

``--input`` is a local .json / .jsonl / .parquet export of the public dataset's rows (``question``,
``answer`` ending with ``#### 42``). Without it the script uses the Hugging Face ``datasets`` cache,
offline, when that package is installed and the split was downloaded before.

Writes ``{output_dir}/{split}.parquet`` with verl's columns: data_source ``openai/gsm8k``, prompt (one
user message: the question and an instruction to answer after ``####``), ability ``math``,
reward_model ``{"style": "rule", "ground_truth": "42"}`` and extra_info ``{split, index, answer,
question}``. Rows are scored by ``hybridrl.rewards.gsm8k``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

try:
    import hybridrl  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hybridrl.rewards.gsm8k import extract_solution

DATA_SOURCE = "openai/gsm8k"
HUB_NAME, HUB_CONFIG = "openai/gsm8k", "main"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def extract_answer(answer: str) -> str | None:
    """The number after the last ``#### `` of a reference solution, commas removed."""
    return extract_solution(answer, method="strict")


def convert_row(row: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One GSM8K row -> one verl-format row; ValueError naming the row when it is unusable."""
    if not isinstance(row, dict):
        raise ValueError(f"Row {index}: expected an object with 'question' and 'answer', got {row!r:.80}.")
    for key in ("question", "answer"):
        if not isinstance(row.get(key), str):
            raise ValueError(
                f"Row {index}: needs a string {key!r} (GSM8K rows have 'question' and "
                f"'answer'), got keys {sorted(row)}."
            )
    question, answer = row["question"], row["answer"]
    ground_truth = extract_answer(answer)
    if ground_truth is None:
        raise ValueError(f"Row {index}: the answer does not end with '#### <number>': {answer[-80:]!r}")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def read_rows(path: str) -> list[dict[str, Any]]:
    """Rows of a local .parquet, .jsonl or .json file (a JSON list, or JSON lines)."""
    file = Path(path)
    if not file.is_file():
        raise SystemExit(f"--input {path!r} does not exist.")
    if file.suffix == ".parquet":
        return pq.read_table(file).to_pylist()
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None  # fall through: JSON lines saved as .json (datasets' to_json default)
        if isinstance(data, list):
            return data
        if data is not None:
            raise SystemExit(f"--input {path!r}: expected a JSON list of rows, got {type(data).__name__}.")
    elif file.suffix != ".jsonl":
        raise SystemExit(f"--input {path!r}: use a .json, .jsonl or .parquet file.")
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"--input {path!r}, line {n}: not valid JSON ({exc}).") from None
    return rows


def load_cached_split(name: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """The split from the local ``datasets`` cache, never downloading; exit saying what to do."""
    hint = (
        f"pass --input with a local .json/.jsonl/.parquet file of {name}'s {split!r} split "
        f"(e.g. exported with datasets' to_json on a machine with network access)."
    )
    if importlib.util.find_spec("datasets") is None:
        raise SystemExit(f"No --input given and the `datasets` package is not installed: {hint}")
    os.environ["HF_DATASETS_OFFLINE"] = "1"  # cache only: this must never reach the network
    os.environ["HF_HUB_OFFLINE"] = "1"
    # The environment above must be set before datasets loads (it reads it at import); optional package.
    import datasets  # noqa: PLC0415 - optional, and only after HF_DATASETS_OFFLINE is set

    datasets.config.HF_DATASETS_OFFLINE = True  # in case datasets was imported before the variable was set

    try:
        ds = datasets.load_dataset(name, config, split=split, download_mode="reuse_cache_if_exists")
    except Exception as exc:
        raise SystemExit(
            f"No --input given and {name} ({split!r}) is not in the local datasets cache "
            f"({type(exc).__name__}: {exc}): {hint}"
        ) from None
    return list(ds)


def write_parquet(rows: list[dict[str, Any]], output_dir: str, split: str) -> Path:
    out = Path(output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{split}.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def convert_main(
    argv: list[str] | None,
    convert: Any,
    hub_name: str,
    hub_config: str | None,
    what: str,
    default_output_dir: str,
    description: str,
) -> Path:
    """The command line shared by the preprocess scripts: read rows, convert each, write one parquet."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--input", help=f"local .json/.jsonl/.parquet file of {what} rows")
    parser.add_argument("--split-name", default="train", help="split name: output file and extra_info.split")
    parser.add_argument("--output-dir", default=default_output_dir)
    args = parser.parse_args(argv)
    rows = read_rows(args.input) if args.input else load_cached_split(hub_name, hub_config, args.split_name)
    if not rows:
        raise SystemExit(f"No rows in {args.input or hub_name}.")
    try:
        converted = [convert(row, i, args.split_name) for i, row in enumerate(rows)]
    except ValueError as exc:
        raise SystemExit(f"{args.input or hub_name}: {exc}") from None
    path = write_parquet(converted, args.output_dir, args.split_name)
    print(f"Wrote {len(converted)} rows to {path}")
    return path


def main(argv: list[str] | None = None) -> Path:
    return convert_main(argv, convert_row, HUB_NAME, HUB_CONFIG, "GSM8K", "data/gsm8k", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
