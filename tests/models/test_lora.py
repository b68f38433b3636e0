"""LoRA adapters (hybridrl.models.lora): loading around them, the reference as the base, the merged hand-over."""

import pytest
import torch

from hybridrl.config.schema import OptimConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.models.loader import empty_causal_lm, load_causal_lm
from hybridrl.models.lora import (
    LoraSpec,
    adapters_disabled,
    initial_adapters,
    merged_weights,
    scalings,
    with_adapters,
)
from hybridrl.models.tiny import ensure_tiny_model
from hybridrl.models.weights import load_weights, materialize


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return ensure_tiny_model(
        tmp_path_factory.mktemp("lora") / "m",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=64,
        seed=0,
    )


SPEC = LoraSpec(4, 8)


def _adapted(path, spec=SPEC, seed=3):
    model, source = empty_causal_lm(str(path))
    source = with_adapters(model, spec, source, seed)
    materialize(model, torch.device("cpu"))
    load_weights(model, source)
    return model


def _train_adapters(model):
    """Adapters that change the output, as after some training (B starts at zero)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)


IDS = torch.tensor([[1, 5, 9, 2, 7, 3], [4, 4, 8, 1, 6, 2]])


def test_adapters_start_at_the_base_model_and_only_they_train(model_dir):
    base, adapted = load_causal_lm(str(model_dir)), _adapted(model_dir)
    with torch.no_grad():
        assert torch.equal(adapted(IDS).logits, base(IDS).logits)  # B = 0: no update yet
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: every projection of every layer, never the output head
    assert sum(".lora_A." in n for n in trainable) == 2 * 7
    assert not any(n.startswith("lm_head") for n in trainable)


def test_initial_adapters_are_seeded_and_the_same_for_any_layout(model_dir):
    a, b = _adapted(model_dir, seed=5), _adapted(model_dir, seed=5)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    values = initial_adapters(a, seed=5)
    assert all(torch.count_nonzero(v) == 0 for n, v in values.items() if ".lora_B." in n)
    assert all(torch.count_nonzero(v) == v.numel() for n, v in values.items() if ".lora_A." in n)


def test_the_reference_is_the_base_model_exactly(model_dir):
    """The KL term's reference with adapters off equals a separate frozen copy of the initial weights."""
    base, adapted = load_causal_lm(str(model_dir)), _adapted(model_dir)
    _train_adapters(adapted)
    with torch.no_grad():
        assert (adapted(IDS).logits - base(IDS).logits).abs().max() > 1e-3
        with adapters_disabled(adapted):
            torch.testing.assert_close(adapted(IDS).logits, base(IDS).logits, atol=1e-6, rtol=0)
        assert (adapted(IDS).logits - base(IDS).logits).abs().max() > 1e-3  # adapters back on
    assert all(p.requires_grad for n, p in adapted.named_parameters() if ".lora_" in n)


def test_merged_weights_are_the_plain_model_that_computes_the_adapted_one(model_dir):
    base, adapted = load_causal_lm(str(model_dir)), _adapted(model_dir, LoraSpec(4, 16))
    _train_adapters(adapted)
    merged = dict(merged_weights(adapted.state_dict().items(), scalings(adapted), torch.float32))
    assert set(merged) == set(base.state_dict())
    base.load_state_dict(merged)
    with torch.no_grad():
        torch.testing.assert_close(base(IDS).logits, adapted(IDS).logits, atol=1e-5, rtol=0)
    assert set(scalings(adapted).values()) == {4.0}  # alpha / rank


def test_targets_and_exclusions_follow_verls_keys(model_dir):
    spec = LoraSpec.from_keys(4, 8, ["q_proj", "v_proj"], None)
    assert spec is not None and LoraSpec.from_keys(0, 8, "all-linear", None) is None
    adapted = _adapted(model_dir, spec)
    assert {n.split(".")[-1] for n in scalings(adapted)} == {"q_proj", "v_proj"}
    excluded = _adapted(model_dir, LoraSpec.from_keys(4, 8, "all-linear", ["down_proj"]))
    assert "down_proj" not in {n.split(".")[-1] for n in scalings(excluded)}
    with pytest.raises(ValueError, match="matches no linear layer"):
        _adapted(model_dir, LoraSpec.from_keys(4, 8, ["no_such_layer"], None))


def test_the_hand_over_gives_the_generation_engine_the_adapted_policy(model_dir):
    """The weights a LoRA actor streams (``TrainEngine.iter_full_weights``) make the engine's plain model
    compute what the adapted actor computes, not the base."""
    adapted = _adapted(model_dir)
    engine = TrainEngine(adapted, torch.device("cpu"), optim_cfg=OptimConfig(lr=1e-2))
    _train_adapters(adapted)
    generation = HFRolloutEngine(load_causal_lm(str(model_dir)), 0, None)
    generation.load_weights(engine.iter_full_weights(torch.float32))  # refuses unknown or missing names
    base = load_causal_lm(str(model_dir))
    with torch.no_grad():
        torch.testing.assert_close(generation.model(IDS).logits, adapted(IDS).logits, atol=1e-5, rtol=0)
        assert (generation.model(IDS).logits - base(IDS).logits).abs().max() > 1e-3
