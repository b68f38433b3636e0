"""Packed rows under ``PACKED_ATTENTION``: the same outputs and gradients as padded rows, documents kept
apart, and never a (tokens x tokens) mask (the dense square that made the packed update slower than the
padded one on a GPU)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers.masking_utils as masking
from transformers import AutoModelForCausalLM

from hybridrl.engine.packing import pack_rows
from hybridrl.models import packed_attention
from hybridrl.models.loader import attention_implementation
from hybridrl.models.packed_attention import PACKED_ATTENTION, Documents, packed_documents
from tests.engine.test_megatron_parity import make_batch
from tests.tiny_models import tiny


def test_documents_from_positions():
    pos = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3], [5, 6, 0, 1, 2, 3, 4, 5, 6]])
    docs = Documents.from_positions(pos)
    # row 2 starts a document even though its positions do not restart at 0
    assert docs.bounds == (0, 3, 5, 9, 11, 18) and docs.max_len == 7
    assert docs.cu.tolist() == list(docs.bounds) and docs.cu.dtype == torch.int32


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_per_document_equals_each_document_alone(kv_heads):
    torch.manual_seed(0)
    lengths = [5, 1, 9, 3]
    total = sum(lengths)
    q = torch.randn(total, 4, 8, requires_grad=True)
    k = torch.randn(total, kv_heads, 8, requires_grad=True)
    v = torch.randn(total, kv_heads, 8, requires_grad=True)
    out = packed_documents(q, k, v, Documents.from_lengths(lengths, q.device), scale=0.3)
    start = 0
    for n in lengths:
        sl = slice(start, start + n)
        qd, kd, vd = (x[sl].transpose(0, 1)[None] for x in (q, k, v))
        ref = F.scaled_dot_product_attention(qd, kd, vd, is_causal=True, scale=0.3, enable_gqa=True)[0].transpose(0, 1)
        torch.testing.assert_close(out[sl], ref, rtol=1e-6, atol=1e-6)
        start += n
    out.sum().backward()  # gradients flow to every input
    assert all(x.grad is not None and x.grad.abs().sum() > 0 for x in (q, k, v))


def test_sliding_window_limits_each_document():
    torch.manual_seed(0)
    q, k, v = (torch.randn(10, 2, 4) for _ in range(3))
    docs = Documents.from_lengths([6, 4], q.device)
    out = packed_documents(q, k, v, docs, window=2)
    i = torch.arange(6)
    band = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 2)
    ref = F.scaled_dot_product_attention(*(x[:6].transpose(0, 1)[None] for x in (q, k, v)), attn_mask=band)
    torch.testing.assert_close(out[:6], ref[0].transpose(0, 1), rtol=1e-6, atol=1e-6)


def _no_square_masks(monkeypatch: pytest.MonkeyPatch, tokens: int) -> list[tuple[int, ...]]:
    """Record every SDPA call's mask shape and fail on any mask (or mask builder) of tokens x tokens."""
    seen: list[tuple[int, ...]] = []
    real_sdpa = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, **kwargs):
        if attn_mask is not None:
            seen.append(tuple(attn_mask.shape))
            assert attn_mask.shape[-1] < tokens or attn_mask.shape[-2] < tokens, "a (T x T) mask reached SDPA"
        assert q.shape[-2] < tokens or q.shape[0] == 1, "attention over the whole packed row"
        return real_sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    def no_mask(*args, **kwargs):
        raise AssertionError("a dense attention mask was built for packed rows")

    monkeypatch.setattr(packed_attention.F, "scaled_dot_product_attention", sdpa)
    for name in ("sdpa_mask", "eager_mask"):
        monkeypatch.setattr(masking, name, no_mask)
        for key in list(masking.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping):
            if masking.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping[key].__name__ == name:
                monkeypatch.setitem(masking.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, key, no_mask)
    return seen


def test_packed_model_matches_padded_and_builds_no_square_mask(tmp_path, monkeypatch):
    """The CPU guard for the GPU's packed path: logits and gradients equal the padded model's, and no
    mask of (packed tokens x packed tokens) is built or passed to attention."""
    path = tiny(tmp_path / "m")
    torch.manual_seed(0)
    padded_model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    packed_model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention_implementation(True))
    assert packed_model.config._attn_implementation == PACKED_ATTENTION
    for m in (padded_model, packed_model):
        m.config.use_cache = False
    t = make_batch(padded_model.config.vocab_size).tensors
    rows = pack_rows(t["input_ids"], t["attention_mask"], t["position_ids"])
    real = t["attention_mask"].reshape(-1).bool()
    padded = padded_model(input_ids=t["input_ids"], attention_mask=t["attention_mask"], position_ids=t["position_ids"])
    padded_logits = padded.logits.reshape(-1, padded.logits.shape[-1])[real]
    seen = _no_square_masks(monkeypatch, rows.num_tokens)
    packed = packed_model(input_ids=rows.input_ids, position_ids=rows.position_ids).logits[0]
    assert seen == []  # per document: causal, no mask at all
    torch.testing.assert_close(packed, padded_logits, rtol=1e-5, atol=1e-5)
    weights = torch.randn_like(packed)
    (padded_logits * weights).sum().backward()
    (packed * weights).sum().backward()
    for (name, a), b in zip(padded_model.named_parameters(), packed_model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_padded_and_cached_calls_still_work(tmp_path):
    """A model built for packed rows still runs a padded batch and decodes with a cache (left padding)."""
    path = tiny(tmp_path / "m")
    reference = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention_implementation(True)).eval()
    t = make_batch(reference.config.vocab_size).tensors
    with torch.no_grad():
        inputs = {k: t[k] for k in ("input_ids", "attention_mask", "position_ids")}
        real = t["attention_mask"].bool()
        torch.testing.assert_close(model(**inputs).logits[real], reference(**inputs).logits[real], rtol=1e-5, atol=1e-5)
        prompt = {"input_ids": t["input_ids"][:, :6], "attention_mask": t["attention_mask"][:, :6].clone()}
        prompt["attention_mask"][:, -1] = 1  # every row has a last prompt token to continue from
        kwargs = dict(max_new_tokens=4, do_sample=False, pad_token_id=0, eos_token_id=None, use_cache=True)
        assert torch.equal(model.generate(**prompt, **kwargs), reference.generate(**prompt, **kwargs))
