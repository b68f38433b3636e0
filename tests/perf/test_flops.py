import pytest
import torch
from transformers import LlamaConfig, Qwen2Config, Qwen2ForCausalLM

from hybridrl.perf.flops import FlopsModel

TINY = dict(
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=4,
    intermediate_size=16,
    vocab_size=10,
)


def test_hand_calculation():
    m = FlopsModel.from_hf_config(TINY)
    # per layer: q 8*8 + k 8*4 + v 8*4 + o 8*8 = 192; mlp 3*8*16 = 384 -> 576; x2 = 1152; lm_head 80
    assert m.matmul_params() == 1232
    # linear: 2*1232*(3+5) = 19712; attention: 4*s^2*2 heads*4 dim*2 layers = 64*s^2 -> 64*34 = 2176
    assert m.forward_flops([3, 5]) == 21888.0
    assert m.step_flops([3, 5], forward_passes=1, train_passes=1) == 21888.0 * 4
    assert m.step_flops([3, 5], forward_passes=2, train_passes=0) == 21888.0 * 2
    assert m.forward_flops([]) == 0.0


def test_defaults_from_llama_config():
    c = LlamaConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96, vocab_size=50)
    m = FlopsModel.from_hf_config(c)
    assert (m.num_kv_heads, m.head_dim) == (4, 16)
    assert m.matmul_params() == 3 * (4 * 64 * 64 + 3 * 64 * 96) + 64 * 50


def test_negative_length_rejected():
    with pytest.raises(ValueError):
        FlopsModel.from_hf_config(TINY).forward_flops([-1])


@pytest.mark.parametrize("tie", [True, False])
def test_matches_qwen2_linear_parameter_count(tie):
    config = Qwen2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        vocab_size=64,
        tie_word_embeddings=tie,
    )
    model = Qwen2ForCausalLM(config)
    # Linear weights only: excludes embeddings (a gather), biases and norms; lm_head counted even if tied.
    n_linear = sum(mod.weight.numel() for mod in model.modules() if isinstance(mod, torch.nn.Linear))
    m = FlopsModel.from_hf_config(config)
    assert m.matmul_params() == n_linear
    assert m.tie_word_embeddings is tie
    seq = 7
    attn = 4 * seq * seq * 4 * 8 * 2
    assert m.forward_flops([seq]) == 2 * n_linear * seq + attn
