"""The data_preprocess scripts on small fixture files: their parquet loads and scores like verl's."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.data.parquet import load_parquet_examples
from hybridrl.rewards.registry import score_batch
from tests.data.char_tokenizer import build_char_tokenizer

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess"


def load_script(name):
    spec = importlib.util.spec_from_file_location(f"preprocess_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gsm8k = load_script("gsm8k")
math_dataset = load_script("math_dataset")

GSM8K_ROWS = [
    {
        "question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
        "answer": "He has 3 + 4 = <<3+4=7>>7 apples.\n#### 7",
    },
    {
        "question": "A farm sells 1,200 eggs a day. How many in 2 days?",
        "answer": "1,200 * 2 = <<1200*2=2400>>2,400\n#### 2,400",
    },
    {"question": "The temperature drops 5 degrees from 2. What is it now?", "answer": "2 - 5 = -3\n#### -3"},
]

MATH_ROWS = [
    {
        "problem": "What is $\\frac{1}{4} + \\frac{1}{4}$?",
        "solution": "We add: $\\frac{1}{4}+\\frac{1}{4} = \\boxed{\\frac{1}{2}}$.",
        "level": "Level 1",
        "type": "Prealgebra",
    },
    {
        "problem": "Solve $x^2 = 4$ for $x > 0$.",
        "solution": "So $x = \\boxed{2}$.",
        "level": "Level 2",
        "type": "Algebra",
    },
    {
        "problem": "Simplify $\\sqrt{8}$.",
        "solution": "$\\sqrt{8} = \\boxed{2\\sqrt{2}}$",
        "level": "Level 3",
        "type": "Algebra",
    },
]


def write_input(tmp_path, rows, fmt):
    path = tmp_path / f"input.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_gsm8k_convert_row_is_verl_format():
    out = gsm8k.convert_row(GSM8K_ROWS[1], 1, "train")
    assert out == {
        "data_source": "openai/gsm8k",
        "prompt": [
            {
                "role": "user",
                "content": GSM8K_ROWS[1]["question"]
                + ' Let\'s think step by step and output the final answer after "####".',
            }
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2400"},
        "extra_info": {
            "split": "train",
            "index": 1,
            "answer": GSM8K_ROWS[1]["answer"],
            "question": GSM8K_ROWS[1]["question"],
        },
    }


def test_math_convert_row_is_verl_format():
    out = math_dataset.convert_row(MATH_ROWS[0], 0, "test")
    assert out["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert out["prompt"] == [
        {
            "role": "user",
            "content": MATH_ROWS[0]["problem"]
            + " Let's think step by step and output the final answer within \\boxed{}.",
        }
    ]
    assert out["ability"] == "math"
    assert out["reward_model"] == {"style": "rule", "ground_truth": "\\frac{1}{2}"}
    assert out["extra_info"] == {
        "split": "test",
        "index": 0,
        "question": MATH_ROWS[0]["problem"],
        "answer": MATH_ROWS[0]["solution"],
        "level": "Level 1",
        "type": "Prealgebra",
    }


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_gsm8k_round_trip(tmp_path, fmt):
    path = gsm8k.main(
        [
            "--input",
            write_input(tmp_path, GSM8K_ROWS, fmt),
            "--split-name",
            "train",
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    assert path == tmp_path / "out" / "train.parquet"
    examples, stats = load_parquet_examples(str(path), build_char_tokenizer(), max_prompt_length=512)
    assert stats["rows"] == 3 and [e.ground_truth for e in examples] == ["7", "2400", "-3"]
    assert examples[0].prompt.endswith('after "####".\n<|assistant|>')
    sources = [e.data_source for e in examples]
    truths = [e.ground_truth for e in examples]
    extras = [e.extra_info for e in examples]
    assert score_batch(sources, [f"Reasoning.\n#### {t}" for t in truths], truths, extras) == [1.0] * 3
    assert score_batch(sources, ["#### 0"] * 3, truths, extras) == [0.0] * 3
    # verl's own answer text scores 1.0 against the extracted ground truth
    assert score_batch(sources, [r["answer"] for r in GSM8K_ROWS], truths, extras) == [1.0] * 3


@pytest.mark.parametrize("fmt", ["json", "jsonl", "parquet"])
def test_math_round_trip(tmp_path, fmt):
    path = math_dataset.main(
        [
            "--input",
            write_input(tmp_path, MATH_ROWS, fmt),
            "--split-name",
            "test",
            "--output-dir",
            str(tmp_path / "out"),
        ]
    )
    assert path == tmp_path / "out" / "test.parquet"
    examples, stats = load_parquet_examples(str(path), build_char_tokenizer(), max_prompt_length=512)
    truths = [e.ground_truth for e in examples]
    assert stats["rows"] == 3 and truths == ["\\frac{1}{2}", "2", "2\\sqrt{2}"]
    sources = [e.data_source for e in examples]
    assert score_batch(sources, [f"Thus $\\boxed{{{t}}}$." for t in truths], truths) == [1.0] * 3
    assert score_batch(sources, [r["solution"] for r in MATH_ROWS], truths) == [1.0] * 3
    assert score_batch(sources, ["\\boxed{0.5}", "\\boxed{x = 2}", "\\boxed{2\\sqrt 2}"], truths) == [1.0] * 3
    assert score_batch(sources, ["\\boxed{3}"] * 3, truths) == [0.0] * 3


def test_scripts_run_from_the_command_line(tmp_path):
    src = write_input(tmp_path, GSM8K_ROWS, "jsonl")
    out = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "gsm8k.py"),
            "--input",
            src,
            "--split-name",
            "test",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "Wrote 3 rows" in out.stdout
    assert pq.read_table(tmp_path / "test.parquet").num_rows == 3


def test_bad_rows_name_the_row(tmp_path):
    rows = GSM8K_ROWS[:1] + [{"question": "q", "answer": "no final marker"}]
    with pytest.raises(SystemExit, match=r"input\.jsonl: Row 1: the answer does not end with '#### <number>'"):
        gsm8k.main(["--input", write_input(tmp_path, rows, "jsonl"), "--output-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"Row 0: needs a string 'problem'"):
        math_dataset.main(
            ["--input", write_input(tmp_path, [{"question": "x"}], "json"), "--output-dir", str(tmp_path)]
        )
    with pytest.raises(SystemExit, match=r"Row 1: the solution has no complete \\boxed"):
        math_dataset.main(
            [
                "--input",
                write_input(tmp_path, MATH_ROWS[:1] + [{"problem": "p", "solution": "42"}], "json"),
                "--output-dir",
                str(tmp_path),
            ]
        )


def test_bad_input_files(tmp_path):
    with pytest.raises(SystemExit, match=r"nope\.jsonl' does not exist"):
        gsm8k.main(["--input", str(tmp_path / "nope.jsonl")])
    csv = tmp_path / "rows.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(SystemExit, match=r"use a \.json, \.jsonl or \.parquet file"):
        gsm8k.main(["--input", str(csv)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(SystemExit, match="No rows"):
        gsm8k.main(["--input", str(empty), "--output-dir", str(tmp_path)])


def test_no_input_without_datasets_package_says_what_to_do(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "datasets" else real(name, *a, **k)
    )
    with pytest.raises(SystemExit, match=r"`datasets` package is not installed: pass --input"):
        gsm8k.main(["--split-name", "train", "--output-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"MATH-lighteval's 'test' split"):
        math_dataset.main(["--split-name", "test", "--output-dir", str(tmp_path)])
