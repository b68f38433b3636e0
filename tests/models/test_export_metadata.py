"""What an exported model carries: the settings it was published with, not the trainer's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig, AutoTokenizer, Qwen2Config, Qwen2Tokenizer

from hybridrl.models.loader import SAMPLE_TEXT, auto_tokenizer_mismatch, config_for_export, load_tokenizer
from tests.examples.gsm8k_fixture import tiny_llama
from tests.tiny_models import tiny


def test_a_saved_tokenizer_keeps_no_load_time_fields(tmp_path):
    tokenizer = load_tokenizer(tiny(tmp_path / "model"))
    tokenizer.save_pretrained(tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())
    assert "local_files_only" not in saved and "is_local" not in saved


def test_an_exported_config_generates_with_its_cache(tmp_path):
    config = AutoConfig.from_pretrained(tiny(tmp_path / "model"))
    config.use_cache = False  # as training loads it
    exported = config_for_export(config)
    assert exported.use_cache is True and config.use_cache is False


def exported_tokenizer(model_dir, out):
    """What an export writes for the tokenizer (``export_actor``): the training tokenizer, saved beside the
    model's config."""
    trained = load_tokenizer(str(model_dir))
    trained.save_pretrained(out)
    shutil.copy(Path(model_dir) / "config.json", Path(out) / "config.json")
    return trained


def qwen2_style(directory):
    vocab = {c: i for i, c in enumerate(["<|endoftext|>", "a", "b", "1", "2", "3", "4", "6", "Ġ", "ab", "Ġa"])}
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[("a", "b"), ("Ġ", "a")],
        unk_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.save_pretrained(directory)
    Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=8,
    ).save_pretrained(directory)
    return directory


@pytest.mark.parametrize("build", [lambda d: tiny_llama(d), qwen2_style], ids=["tokenizers-built", "qwen2-style"])
def test_an_exported_tokenizer_loads_as_it_trained(tmp_path, build):
    trained = exported_tokenizer(build(tmp_path / "model"), tmp_path / "out")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(loaded) is type(trained)
    assert loaded(SAMPLE_TEXT)["input_ids"] == trained(SAMPLE_TEXT)["input_ids"]
    assert auto_tokenizer_mismatch(tmp_path / "out", trained) is None


def test_an_export_says_when_autotokenizer_would_load_another_class(tmp_path):
    # The built-in tiny model is a qwen2 with a character tokenizer: transformers 5 gives every qwen2 model
    # Qwen2Tokenizer, whatever the tokenizer config names, and the export warns.
    trained = exported_tokenizer(tiny(tmp_path / "model"), tmp_path / "out")
    assert auto_tokenizer_mismatch(tmp_path / "out", trained) == (
        "AutoTokenizer loads it as Qwen2Tokenizer, training used TokenizersBackend"
    )
