import torch

from hybridrl.config.schema import RolloutConfig, SamplingConfig
from hybridrl.engine import prompt_sharing
from hybridrl.generation.engines.base import EarlyReturn, GenerationRequest, position_ids_from, response_mask_from
from hybridrl.generation.engines.factory import hf_static_cache
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.models.loader import load_causal_lm, load_tokenizer
from hybridrl.models.tiny import ensure_tiny_model


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
    kwargs = dict(max_new_tokens=5, sampling=SamplingConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0))
    a = engine.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], seed=7, **kwargs))
    b = engine.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], seed=7, **kwargs))
    assert a["responses"].shape == (2, 5) and a["input_ids"].shape == (2, 8)
    assert torch.equal(a["responses"], b["responses"])
    assert torch.equal(a["attention_mask"][:, 3:], a["response_mask"])
    # padding after EOS is the pad token
    assert torch.all((a["responses"] == tok.pad_token_id) | a["response_mask"].bool())


def _tiny_engine(tmp_path, **kwargs):
    path = ensure_tiny_model(
        tmp_path / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        seed=0,
    )
    tok = load_tokenizer(path)
    return HFRolloutEngine(load_causal_lm(path), tok.pad_token_id, tok.eos_token_id, **kwargs), tok


def test_rollout_log_probs_are_the_temperature_scaled_ones_of_the_sampled_tokens(tmp_path):
    engine, tok = _tiny_engine(tmp_path)
    enc = tok(["12=", "3=", "456="], padding=True, return_tensors="pt", add_special_tokens=False)
    temperature = 0.7
    out = engine.generate(
        GenerationRequest(
            enc["input_ids"],
            enc["attention_mask"],
            max_new_tokens=6,
            sampling=SamplingConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0),
            seed=3,
        )
    )
    # a full forward over prompt + response: the trainer's view of the same tokens
    with torch.no_grad():
        logits = engine.model(
            input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
        ).logits
    prompt_len = enc["input_ids"].shape[1]
    scores = torch.log_softmax(logits[:, prompt_len - 1 : -1].float() / temperature, dim=-1)
    expected = scores.gather(-1, out["responses"][..., None]).squeeze(-1) * out["response_mask"]
    assert out["rollout_log_probs"].shape == out["responses"].shape
    assert out["response_mask"].sum() > 3
    torch.testing.assert_close(out["rollout_log_probs"], expected, atol=1e-5, rtol=0)


def test_generate_in_chunks_of_a_token_budget_matches_one_call(tmp_path):
    whole, tok = _tiny_engine(tmp_path)
    chunked, _ = _tiny_engine(tmp_path, max_tokens_per_generate=2 * (3 + 5))  # two rows per call
    enc = tok(["12=", "3=", "45=", "6=", "7="], padding=True, return_tensors="pt", add_special_tokens=False)
    assert chunked.rows_per_call(enc["input_ids"].shape[1], 5, 5) == 2
    kwargs = dict(max_new_tokens=5, sampling=SamplingConfig(False, 1.0, 0, 1.0), seed=0)
    a = whole.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], **kwargs))
    b = chunked.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], **kwargs))
    assert torch.equal(a["responses"], b["responses"])
    torch.testing.assert_close(a["rollout_log_probs"], b["rollout_log_probs"], atol=1e-5, rtol=0)


def test_rows_sharing_a_prompt_prefill_it_once_and_sample_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(prompt_sharing, "MIN_SAVED_TOKENS", 0)  # 12 rows of 4-token prompts save 36 tokens
    engine, tok = _tiny_engine(tmp_path)
    enc = tok(["12=", "3=", "456="], padding=True, return_tensors="pt", add_special_tokens=False)
    ids, mask = enc["input_ids"].repeat_interleave(4, 0), enc["attention_mask"].repeat_interleave(4, 0)
    kwargs = dict(max_new_tokens=6, sampling=SamplingConfig(True, 0.9, 0, 1.0), seed=5)
    prefilled = []
    original = engine._shared_prefill

    def recorded(input_ids, attention_mask):
        out = original(input_ids, attention_mask)
        prefilled.append(None if out is None else (out[1].get_seq_length(), out[1].layers[0].keys.shape[0]))
        return out

    monkeypatch.setattr(engine, "_shared_prefill", recorded)
    shared = engine.generate(GenerationRequest(ids, mask, **kwargs))
    assert prefilled == [(ids.shape[1] - 1, len(ids))]  # every prompt token but the last, for every row
    monkeypatch.setattr(engine, "_shared_prefill", lambda i, m: None)
    plain = engine.generate(GenerationRequest(ids, mask, **kwargs))
    assert torch.equal(shared["responses"], plain["responses"])
    assert len({tuple(r) for r in shared["responses"].tolist()}) > 3  # the samples of a prompt differ
    torch.testing.assert_close(shared["rollout_log_probs"], plain["rollout_log_probs"], atol=1e-5, rtol=0)


def test_static_cache_mode_generates_what_the_dynamic_cache_does(tmp_path):
    """The GPU mode's cache (compiled only on CUDA) changes where keys live, not what is sampled."""
    dynamic, tok = _tiny_engine(tmp_path)
    static, _ = _tiny_engine(tmp_path, static_cache=True)
    enc = tok(["12=", "3=", "456="], padding=True, return_tensors="pt", add_special_tokens=False)
    kwargs = dict(max_new_tokens=6, sampling=SamplingConfig(True, 0.9, 0, 1.0), seed=5)
    a = dynamic.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], **kwargs))
    b = static.generate(GenerationRequest(enc["input_ids"], enc["attention_mask"], **kwargs))
    assert torch.equal(a["responses"], b["responses"])
    torch.testing.assert_close(a["rollout_log_probs"], b["rollout_log_probs"], atol=1e-5, rtol=0)


def test_static_cache_mode_is_asked_for_with_enforce_eager_false_and_taken_on_cuda_only():
    assert hf_static_cache(RolloutConfig(enforce_eager=False), torch.device("cuda"))
    assert not hf_static_cache(RolloutConfig(enforce_eager=True), torch.device("cuda"))
    assert not hf_static_cache(RolloutConfig(enforce_eager=False), torch.device("cpu"))


def _early(groups: list[int], wanted: int, interrupted=lambda: False) -> EarlyReturn:
    return EarlyReturn(tuple(groups), wanted, interrupted)


def _full_forward_log_probs(engine, out, prompt_len: int, temperature: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        logits = engine.model(
            input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
        ).logits
    scores = torch.log_softmax(logits[:, prompt_len - 1 : -1].float() / temperature, dim=-1)
    return scores.gather(-1, out["responses"][..., None]).squeeze(-1) * out["response_mask"]


def test_early_return_calls_drop_finished_rows_and_keep_the_trainers_log_probs(tmp_path):
    """Partial rollouts' decode loop: finished rows leave the cache as they finish, yet every row's tokens and
    log-probs are those a full forward gives (the trainer's), and greedy rows match ``generate``'s."""
    engine, tok = _tiny_engine(tmp_path)
    enc = tok(["12=", "3=", "456=", "7=", "89=", "0="], padding=True, return_tensors="pt", add_special_tokens=False)
    greedy = SamplingConfig(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)
    args = (enc["input_ids"], enc["attention_mask"])
    plain = engine.generate(GenerationRequest(*args, max_new_tokens=12, sampling=greedy, seed=0))
    pruned = engine.generate(
        GenerationRequest(*args, max_new_tokens=12, sampling=greedy, seed=0, early_return=_early([0] * 6, 1))
    )
    assert torch.equal(plain["responses"], pruned["responses"])
    torch.testing.assert_close(plain["rollout_log_probs"], pruned["rollout_log_probs"], atol=1e-5, rtol=0)
    sampled = SamplingConfig(do_sample=True, temperature=0.7, top_k=0, top_p=1.0)
    out = engine.generate(
        GenerationRequest(*args, max_new_tokens=12, sampling=sampled, seed=5, early_return=_early([0] * 6, 1))
    )
    expected = _full_forward_log_probs(engine, out, enc["input_ids"].shape[1], temperature=0.7)
    assert out["response_mask"].sum() > 6
    torch.testing.assert_close(out["rollout_log_probs"], expected, atol=1e-5, rtol=0)


def test_early_return_stops_once_the_wanted_groups_finish_or_when_interrupted(tmp_path):
    engine, tok = _tiny_engine(tmp_path)
    eos = tok.eos_token_id
    enc = tok(["12=", "3=", "456=", "7="], padding=True, return_tensors="pt", add_special_tokens=False)
    sampled = SamplingConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    args = (enc["input_ids"], enc["attention_mask"])
    whole = engine.generate(
        GenerationRequest(*args, max_new_tokens=64, sampling=sampled, seed=2, early_return=_early([0, 0, 1, 1], 2))
    )
    lengths = whole["response_mask"].sum(-1)
    ended = whole["responses"].gather(1, (lengths - 1)[:, None]).squeeze(1) == eos
    assert bool(ended.all())  # both groups wanted: every row ran to its end
    first = engine.generate(
        GenerationRequest(*args, max_new_tokens=64, sampling=sampled, seed=2, early_return=_early([0, 0, 1, 1], 1))
    )
    first_lengths = first["response_mask"].sum(-1)
    done = first["responses"].gather(1, (first_lengths - 1)[:, None]).squeeze(1) == eos
    group_done = [bool(done[:2].all()), bool(done[2:].all())]
    assert sum(group_done) >= 1 and not all(group_done)  # it returned once one group was finished
    # the same seed draws the same tokens: the early call's rows are prefixes of the whole call's
    for row in range(4):
        n = int(first_lengths[row])
        assert torch.equal(first["responses"][row, :n], whole["responses"][row, :n])
        assert first["response_mask"][row, n:].sum() == 0
    steps = []
    interrupted = engine.generate(
        GenerationRequest(
            *args,
            max_new_tokens=64,
            sampling=sampled,
            seed=2,
            early_return=_early([0, 1, 2, 3], 4, interrupted=lambda: steps.append(1) or len(steps) >= 3),
        )
    )
    assert int(interrupted["response_mask"].sum(-1).max()) == 3  # stopped at its third token
