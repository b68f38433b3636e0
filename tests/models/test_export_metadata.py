"""What an exported model carries: the settings it was published with, not the trainer's."""

from __future__ import annotations

import json

from transformers import AutoConfig

from hybridrl.models.loader import config_for_export, load_tokenizer
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
