"""Packed rows: a Hugging Face model on one packed sequence gives each row's padded outputs, rows apart."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

from hybridrl.engine.packing import pack_rows, pad_packed
from tests.engine.test_megatron_parity import make_batch
from tests.tiny_models import tiny


def test_unpack_inverts_pack():
    batch = make_batch(20)
    t = batch.tensors
    rows = pack_rows(t["input_ids"], t["attention_mask"], t["position_ids"], t["response_mask"])
    assert rows.num_tokens == int(t["attention_mask"].sum())
    # Each response token is the token after its predicting position, and goes back where it came from.
    predicted = rows.input_ids[0, rows.response_index + 1]
    assert torch.equal(rows.unpack_responses(predicted), t["responses"] * t["response_mask"])
    last = rows.last_token_index()
    lengths = t["attention_mask"].sum(-1)
    assert torch.equal(last, lengths.cumsum(0) - 1)
    ids, pos = pad_packed(rows.input_ids, rows.position_ids, rows.num_tokens + 3)
    assert ids.shape[1] == rows.num_tokens + 3 and torch.equal(pos[0, -3:], pos[0, -4] + torch.arange(1, 4))


def test_packed_logits_equal_padded_and_rows_stay_apart(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny(tmp_path / "m"), attn_implementation="sdpa").eval()
    model.config.use_cache = False  # with a cache, Hugging Face does not look for packed rows (as in training)
    t = make_batch(model.config.vocab_size).tensors
    rows = pack_rows(t["input_ids"], t["attention_mask"], t["position_ids"])
    with torch.no_grad():
        padded = model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"])
        packed = model(input_ids=rows.input_ids, position_ids=rows.position_ids).logits[0]
        real = t["attention_mask"].reshape(-1).bool()
        torch.testing.assert_close(packed, padded.logits.reshape(-1, packed.shape[-1])[real], rtol=1e-5, atol=1e-5)
        # Changing the first row's tokens changes no other row's outputs.
        other = rows.input_ids.clone()
        first = int(t["attention_mask"][0].sum())
        other[0, :first] = (other[0, :first] + 1) % model.config.vocab_size
        changed = model(input_ids=other, position_ids=rows.position_ids).logits[0]
    assert not torch.allclose(changed[:first], packed[:first])
    torch.testing.assert_close(changed[first:], packed[first:], rtol=0, atol=1e-6)
