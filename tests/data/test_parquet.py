import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.data.dataset import PromptDataset
from hybridrl.data.parquet import load_parquet_examples
from hybridrl.data.tasks import Example
from hybridrl.models.tiny import build_tokenizer
from hybridrl.rewards.registry import score_batch
from tests.data.char_tokenizer import build_char_tokenizer


def row(question="What is 2+3?", answer="5", source="openai/gsm8k", **overrides):
    r = {
        "data_source": source,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": "train", "index": 0},
    }
    r.update(overrides)
    return r


def write(tmp_path, rows, name="data.parquet", schema=None):
    path = tmp_path / name
    table = pa.Table.from_pylist(rows, schema=schema) if schema else pa.Table.from_pylist(rows)
    pq.write_table(table, path)
    return str(path)


def load(files, tok=None, **kwargs):
    kwargs.setdefault("max_prompt_length", 256)
    return load_parquet_examples(files, tok or build_char_tokenizer(), **kwargs)


def test_good_rows_are_chat_templated(tmp_path, caplog):
    path = write(tmp_path, [row(), row("2*4?", "8", extra_info={"split": "train", "index": 1})])
    with caplog.at_level(logging.INFO, logger="hybridrl.data.parquet"):
        examples, stats = load(path)
    assert stats == {"rows": 2, "filtered_overlong": 0, "truncated": 0}
    assert "2 rows, 0 overlong filtered, 0 truncated" in caplog.text
    ex = examples[0]
    assert ex.prompt == "<|user|>What is 2+3?\n<|assistant|>"
    assert (ex.ground_truth, ex.data_source, ex.ability) == ("5", "openai/gsm8k", "math")
    assert ex.extra_info == {"split": "train", "index": 0}
    assert examples[1].extra_info["index"] == 1
    # the examples feed the existing dataset and reward registry unchanged
    batch = PromptDataset(examples, build_char_tokenizer(), max_prompt_length=256).collate([0, 1])
    assert batch.non_tensors["prompt_text"][1] == "<|user|>2*4?\n<|assistant|>"
    assert score_batch(batch.non_tensors["data_source"], ["#### 5", "#### 9"], batch.non_tensors["ground_truth"]) == [
        1.0,
        0.0,
    ]


def test_optional_columns_and_custom_prompt_key(tmp_path):
    r = row()
    del r["ability"], r["extra_info"]
    r["question_chat"] = r.pop("prompt")
    r["reward_model"] = {"ground_truth": "5"}  # no style
    path = write(tmp_path, [r])
    (ex,), _ = load(path, prompt_key="question_chat")
    assert ex.ability is None and ex.extra_info is None and ex.ground_truth == "5"


def test_multi_turn_prompt_and_map_extra_info(tmp_path):
    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("reward_model", pa.struct([("ground_truth", pa.string())])),
            ("extra_info", pa.map_(pa.string(), pa.string())),
        ]
    )
    r = {
        "data_source": "math",
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}],
        "reward_model": {"ground_truth": "2"},
        "extra_info": [("split", "test")],
    }
    (ex,), _ = load(write(tmp_path, [r], schema=schema))
    assert ex.prompt == "<|system|>Be brief.\n<|user|>1+1?\n<|assistant|>"
    assert ex.extra_info == {"split": "test"}


def test_two_files_concatenate_in_order(tmp_path):
    a = write(tmp_path, [row("a1"), row("a2")], name="a.parquet")
    b = write(tmp_path, [row("b1")], name="b.parquet")
    examples, stats = load([b, a])
    assert [e.prompt.split("|>")[1].split("\n")[0] for e in examples] == ["b1", "a1", "a2"]
    assert stats["rows"] == 3


def test_missing_file_names_the_path(tmp_path):
    good = write(tmp_path, [row()])
    with pytest.raises(FileNotFoundError, match=r"missing\.parquet"):
        load([good, str(tmp_path / "missing.parquet")])


def test_not_parquet(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_text("not parquet")
    with pytest.raises(ValueError, match=r"junk\.parquet: cannot be read as parquet"):
        load(str(path))


def test_tokenizer_without_chat_template(tmp_path):
    with pytest.raises(ValueError, match=r"no chat template.*chat/instruct model"):
        load(write(tmp_path, [row()]), tok=build_char_tokenizer(chat_template=None))


@pytest.mark.parametrize("column", ["data_source", "prompt", "reward_model"])
def test_missing_column(tmp_path, column):
    r = row()
    del r[column]
    with pytest.raises(ValueError, match=rf"bad\.parquet: row 0, column '{column}': missing column"):
        load(write(tmp_path, [r], name="bad.parquet"))


@pytest.mark.parametrize(
    "overrides, column, message",
    [
        ({"data_source": ""}, "data_source", "non-empty string"),
        ({"data_source": None}, "data_source", "non-empty string"),
        ({"prompt": []}, "prompt", "non-empty list"),
        ({"prompt": None}, "prompt", "non-empty list"),
        ({"prompt": "What is 2+3?"}, "prompt", "plain string"),
        ({"prompt": [{"role": "user"}]}, "prompt", "message 0 must be a dict with string 'role' and 'content'"),
        ({"prompt": [{"content": "hi"}]}, "prompt", "message 0 must be a dict"),
        ({"ability": 3}, "ability", "must be a string"),
        ({"reward_model": {"style": "rule"}}, "reward_model", "no 'ground_truth'"),
        ({"reward_model": {"style": "rule", "ground_truth": None}}, "reward_model", "no 'ground_truth'"),
        ({"reward_model": None}, "reward_model", "must be a struct"),
        ({"reward_model": "5"}, "reward_model", "must be a struct"),
        ({"extra_info": "train"}, "extra_info", "must be a struct/dict"),
    ],
)
def test_malformed_row_names_file_row_and_column(tmp_path, overrides, column, message):
    # the bad row is row 2, after two good ones; where pyarrow cannot put the bad value in the same
    # column as good ones (a string among structs), the bad row is written alone
    bad = row(**overrides)
    rows = [row(), row(), bad]
    try:
        path = write(tmp_path, rows, name="bad.parquet")
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        path = write(tmp_path, [bad], name="bad.parquet")
        expected_row = 0
    else:
        expected_row = 2
    with pytest.raises(ValueError, match=rf"bad\.parquet: row {expected_row}, column '{column}': .*{message}"):
        load(path)


def test_overlong_filtered(tmp_path, caplog):
    # "<|user|>" + content + "\n<|assistant|>" = 22 + len(content) characters = tokens
    path = write(tmp_path, [row("x" * 8), row("y" * 30), row("z" * 10)])
    with caplog.at_level(logging.INFO, logger="hybridrl.data.parquet"):
        examples, stats = load(path, max_prompt_length=32)
    assert [e.prompt[8] for e in examples] == ["x", "z"]
    assert stats == {"rows": 3, "filtered_overlong": 1, "truncated": 0}
    assert "1 overlong filtered" in caplog.text
    with pytest.raises(ValueError, match="All 3 prompts .* longer than max_prompt_length=10"):
        load(path, max_prompt_length=10)


def test_overlong_error(tmp_path):
    path = write(tmp_path, [row("x"), row("y" * 30)], name="long.parquet")
    with pytest.raises(
        ValueError,
        match=r"long\.parquet: row 1, column 'prompt': the templated prompt has 52 "
        r"tokens, more than max_prompt_length=32",
    ):
        load(path, max_prompt_length=32, filter_overlong_prompts=False)


def test_overlong_truncation_left_and_right(tmp_path):
    tok = build_char_tokenizer()
    path = write(tmp_path, [row("0123456789" * 3), row("short")])
    (left, short), stats = load(path, tok, max_prompt_length=32, filter_overlong_prompts=False, truncation="left")
    assert stats == {"rows": 2, "filtered_overlong": 0, "truncated": 1}
    assert left == Example(
        prompt="234567890123456789\n<|assistant|>",
        ground_truth="5",
        data_source="openai/gsm8k",
        extra_info={"split": "train", "index": 0},
        ability="math",
        messages=[
            {"role": "user", "content": "0123456789" * 3}
        ],  # the row's own, untruncated (an interaction reads them)
    )
    assert len(tok(left.prompt, add_special_tokens=False)["input_ids"]) == 32
    assert short.prompt == "<|user|>short\n<|assistant|>"
    (right, _), _ = load(path, tok, max_prompt_length=32, filter_overlong_prompts=False, truncation="right")
    assert right.prompt == "<|user|>012345678901234567890123"


def test_truncation_retokenizes_when_decode_grows(tmp_path):
    # an out-of-vocabulary character decodes to "<unk>" (5 characters = 5 tokens when re-encoded):
    # the text is cut further until it fits
    tok = build_char_tokenizer()
    path = write(tmp_path, [row("é" + "9" * 40)])
    (ex,), _ = load(path, tok, max_prompt_length=30, filter_overlong_prompts=False, truncation="right")
    assert len(tok(ex.prompt, add_special_tokens=False)["input_ids"]) <= 30
    assert ex.prompt.startswith("<|user|><unk>")


def test_bad_arguments(tmp_path):
    path = write(tmp_path, [row()])
    with pytest.raises(ValueError, match="truncation='middle'"):
        load(path, truncation="middle")
    with pytest.raises(ValueError, match="No parquet files"):
        load([])


def test_tiny_tokenizer_with_a_chat_template(tmp_path):
    tok = build_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}"
    )
    (ex,), _ = load(write(tmp_path, [row("12+3", "15")]), tok, max_prompt_length=8)
    assert ex.prompt == "12+3="
