#!/usr/bin/env python
"""Convert the MATH dataset (``DigitalLearningGmbH/MATH-lighteval``) to verl-format parquet.

    python examples/data_preprocess/math_dataset.py --input math_train.jsonl --split-name train --output-dir data/math
    python examples/data_preprocess/math_dataset.py --input math_test.jsonl  --split-name test  --output-dir data/math

``--input`` is a local .json / .jsonl / .parquet export of the public dataset's rows (``problem``,
``solution`` with the answer in ``\\boxed{}``, ``level``, ``type``). Without it the script uses the
Hugging Face ``datasets`` cache, offline, when that package is installed and the split was
downloaded before.

Writes ``{output_dir}/{split}.parquet`` with verl's columns: data_source
``DigitalLearningGmbH/MATH-lighteval``, prompt (one user message: the problem and an instruction to
box the answer), ability ``math``, reward_model ``{"style": "rule", "ground_truth": <boxed answer>}``
and extra_info ``{split, index, question, answer, level, type}``. Rows are scored by
``hybridrl.rewards.math_verify``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

try:
    import hybridrl  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from hybridrl.rewards.math_verify import last_boxed_only_string, remove_boxed


def _sibling(name: str):
    """The file-reading / cache / writing helpers are gsm8k.py's: load that script by its path."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_hybridrl_preprocess_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_io = _sibling("gsm8k")

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
HUB_NAME, HUB_CONFIG = "DigitalLearningGmbH/MATH-lighteval", "default"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def extract_answer(solution: str) -> str | None:
    """The content of the last ``\\boxed{...}`` of a reference solution."""
    boxed = last_boxed_only_string(solution)
    return remove_boxed(boxed) if boxed is not None else None


def convert_row(row: dict[str, Any], index: int, split: str) -> dict[str, Any]:
    """One MATH row -> one verl-format row; ValueError naming the row when it is unusable."""
    if not isinstance(row, dict):
        raise ValueError(f"Row {index}: expected an object with 'problem' and 'solution', got {row!r:.80}.")
    for key in ("problem", "solution"):
        if not isinstance(row.get(key), str):
            raise ValueError(
                f"Row {index}: needs a string {key!r} (MATH rows have 'problem', 'solution', "
                f"'level', 'type'), got keys {sorted(row)}."
            )
    problem, solution = row["problem"], row["solution"]
    ground_truth = extract_answer(solution)
    if ground_truth is None:
        raise ValueError(f"Row {index}: the solution has no complete \\boxed{{...}} answer: {solution[-80:]!r}")
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": problem + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "split": split,
            "index": index,
            "question": problem,
            "answer": solution,
            "level": row.get("level"),
            "type": row.get("type"),
        },
    }


def main(argv: list[str] | None = None) -> Path:
    return _io.convert_main(argv, convert_row, HUB_NAME, HUB_CONFIG, "MATH", "data/math", __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
