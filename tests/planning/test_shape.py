"""The planner's parameter counts equal those of the models transformers and PEFT build from the same config."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from peft import LoraConfig, inject_adapter_in_model
from transformers import AutoConfig, AutoModelForCausalLM

from hybridrl.config.schema import ModelConfig
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.planning.shape import model_shape, read_shape

SHAPES = {
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=96,
        vocab_size=101,
        tie_word_embeddings=False,
    ),  # fmt: skip
    "llama-tied": dict(
        model_type="llama",
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=3,
        intermediate_size=80,
        vocab_size=77,
        tie_word_embeddings=True,
    ),  # fmt: skip
}


def _model(tmp_path, spec):
    (tmp_path / "config.json").write_text(json.dumps(spec))
    config = AutoConfig.from_pretrained(tmp_path)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("name", SHAPES)
def test_counts_match_the_built_model(tmp_path, name):
    model = _model(tmp_path, SHAPES[name])
    shape = read_shape(tmp_path)
    assert shape.params == sum(p.numel() for p in model.parameters())
    assert shape.layer_params == sum(p.numel() for p in model.model.layers[0].parameters())
    assert shape.largest_tensor == max(p.numel() for p in model.parameters())
    inject_adapter_in_model(LoraConfig(r=8, target_modules="all-linear"), model)
    adapters = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)
    assert shape.lora_params(8) == adapters


def test_the_built_in_model_needs_no_file(tmp_path):
    cfg = ModelConfig()
    built = ensure_tiny_model(tmp_path, **dataclasses.asdict(cfg.tiny))
    assert model_shape(cfg) == read_shape(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model_shape(cfg).params == sum(p.numel() for p in model.parameters())


def test_a_config_without_a_size_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "hidden_size": 8}))
    with pytest.raises(ValueError, match=r"has no 'num_attention_heads'"):
        read_shape(tmp_path)
    with pytest.raises(ValueError, match=r"no config.json in"):
        read_shape(tmp_path / "missing")
