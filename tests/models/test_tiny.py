import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hybridrl.models.loader import load_causal_lm, load_tokenizer, load_value_model
from hybridrl.models.tiny import ensure_tiny_model

TINY = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, seed=0
)


def test_tiny_model_round_trips_through_hf(tmp_path):
    path = ensure_tiny_model(tmp_path / "m", **TINY)
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("123=", add_special_tokens=False)["input_ids"]
    assert len(ids) == 4 and tok.decode(ids) == "123="
    model = AutoModelForCausalLM.from_pretrained(path)
    assert model.config.model_type == "qwen2"
    assert model(torch.tensor([ids])).logits.shape == (1, 4, len(tok))


def test_tiny_model_is_reproducible_and_cached(tmp_path):
    a = ensure_tiny_model(tmp_path / "a", **TINY)
    b = ensure_tiny_model(tmp_path / "b", **TINY)
    ma, mb = load_causal_lm(a), load_causal_lm(b)
    for (na, pa), (_, pb) in zip(ma.state_dict().items(), mb.state_dict().items()):
        assert torch.equal(pa, pb), na
    stamp = (tmp_path / "a" / "model.safetensors").stat().st_mtime_ns
    ensure_tiny_model(tmp_path / "a", **TINY)
    assert (tmp_path / "a" / "model.safetensors").stat().st_mtime_ns == stamp


def test_value_model_head_starts_at_zero(tmp_path):
    path = ensure_tiny_model(tmp_path / "m", **TINY)
    tok = load_tokenizer(path)
    assert tok.padding_side == "left"
    vm = load_value_model(path)
    ids = torch.tensor([[4, 5, 6, 13]])
    values = vm(ids, torch.ones_like(ids), torch.arange(4)[None])
    assert values.shape == (1, 4) and torch.count_nonzero(values) == 0


def test_missing_model_dir_is_a_clear_error(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError, match="does not exist; give a local Hugging Face model directory"):
        load_causal_lm(str(tmp_path / "nope"))


def test_reloaded_tokenizer_keeps_every_character(tmp_path):
    path = ensure_tiny_model(tmp_path / "m", **TINY)
    tok = load_tokenizer(path)
    ids = tok("12 + 3", add_special_tokens=False)["input_ids"]
    assert len(ids) == 6 and tok.decode(ids) == "12 + 3"
