import torch

from hybridrl.models.loader import load_causal_lm, load_tokenizer
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.rollout.hf_engine import HFRolloutEngine, position_ids_from, response_mask_from


def test_response_mask_keeps_first_eos_and_drops_after():
    eos, pad = 1, 0
    responses = torch.tensor([[5, 6, 1, 0], [5, 1, 7, 1], [5, 6, 7, 8]])
    assert response_mask_from(responses, eos, pad).tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]


def test_position_ids_skip_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert position_ids_from(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]]


def test_generate_shapes_and_seed_determinism(tmp_path):
    path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        seed=0,
    )
    tok = load_tokenizer(path)
    engine = HFRolloutEngine(load_causal_lm(path), tok.pad_token_id, tok.eos_token_id)
    enc = tok(["12=", "3="], padding=True, return_tensors="pt", add_special_tokens=False)
    kwargs = dict(max_new_tokens=5, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    a = engine.generate(enc["input_ids"], enc["attention_mask"], seed=7, **kwargs)
    b = engine.generate(enc["input_ids"], enc["attention_mask"], seed=7, **kwargs)
    assert a["responses"].shape == (2, 5) and a["input_ids"].shape == (2, 8)
    assert torch.equal(a["responses"], b["responses"])
    assert torch.equal(a["attention_mask"][:, 3:], a["response_mask"])
    # padding after EOS is the pad token
    assert torch.all((a["responses"] == tok.pad_token_id) | a["response_mask"].bool())
