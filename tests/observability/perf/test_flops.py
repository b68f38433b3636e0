import pytest
import torch
from transformers import LlamaConfig, Qwen2Config, Qwen2ForCausalLM

from hybridrl.config.loader import load_config
from hybridrl.observability.perf.flops import FlopsModel
from hybridrl.observability.perf_metrics import StepPerf
from hybridrl.protocol import Batch

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
    # logits at 2 positions only: the head's 2*80 FLOPs per token for 2 tokens, not 8
    assert m.forward_flops([3, 5], head_tokens=2) == 21888.0 - 2 * 80 * 6
    assert m.layer_params() + m.head_params() == m.matmul_params()
    assert "2 layers" in m.describe() and "vocabulary 10" in m.describe()
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


def test_step_counts_the_phases_that_ran():
    """Per phase: logits only at response tokens in the actor's passes, none in the critic's; a phase that
    did not run (no time) counts nothing; each phase's MFU is over its own time."""
    cfg = load_config(["actor_rollout_ref.actor.ppo_epochs=2", "critic.ppo_epochs=1"])
    m = FlopsModel.from_hf_config(TINY)
    perf = StepPerf(cfg, m, [1e6, 1e6], "test")
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    batch = Batch.from_dict(tensors={"attention_mask": mask, "response_mask": torch.tensor([[1, 0], [1, 1]])})
    timings = {"step": 10.0, "gen": 2.0, "ref": 1.0, "values": 1.0, "update_actor": 4.0, "update_critic": 2.0}
    phases = perf.phase_flops(batch, timings)
    assert set(phases) == {"gen", "ref", "values", "update_actor", "update_critic"}  # no old_log_prob pass
    actor_forward = m.forward_flops([3, 4], head_tokens=3)
    assert phases["gen"] == phases["ref"] == actor_forward
    assert phases["values"] == m.forward_flops([3, 4], head_tokens=0)
    assert phases["update_actor"] == 6 * actor_forward and phases["update_critic"] == 3 * phases["values"]
    out = perf.metrics(batch, timings)
    assert out["perf/flops_per_step"] == sum(phases.values())
    assert out["perf/mfu"] == pytest.approx(sum(phases.values()) / 10.0 / 2e6)
    assert out["perf/mfu/update_actor"] == pytest.approx(phases["update_actor"] / 4.0 / 2e6)


@pytest.mark.parametrize(("source", "raised"), [("cache", True), ("calibrated", True), ("table:H100 SXM bf16", False)])
def test_a_measured_peak_is_at_least_what_a_step_achieved(source, raised):
    """A CPU peak calibrated on a busy host may sit below a later step's throughput: MFU stays at most 1 by
    raising the peak to it. A datasheet's peak is never raised."""
    cfg = load_config([])
    perf = StepPerf(cfg, FlopsModel.from_hf_config(TINY), [1.0], source)
    batch = Batch.from_dict(
        tensors={"attention_mask": torch.ones(2, 4, dtype=torch.long), "response_mask": torch.ones(2, 2)}
    )
    out = perf.metrics(batch, {"step": 1.0, "gen": 0.25, "update_actor": 0.5})
    fastest = max(out[f"perf/mfu/{phase}"] for phase in ("gen", "update_actor"))
    if raised:
        assert fastest == pytest.approx(1.0) and out["perf/mfu"] < 1.0
    else:
        assert fastest > 1.0 and perf.peak_total == 1.0
