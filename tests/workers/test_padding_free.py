"""Padding-free forward passes (use_remove_padding), token-budget micro-batches (use_dynamic_bsz) and
log-probs from hidden states (use_fused_kernels) train exactly like the padded, fixed-row path: log-probs, values, losses, gradient norms and weights, on FSDP and
the megatron layouts (fp32, within 1e-5)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from hybridrl.config.errors import ConfigError
from hybridrl.preflight.checks import load_and_check
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import _close
from tests.engine.test_megatron_parity import make_batch, megatron, train_on_rank
from tests.tiny_models import tiny

VALUES = ("critic.model.value_head_init_std=0.1",)  # non-zero values from the start: the value path counts
FUSED = ("actor_rollout_ref.model.use_fused_kernels=true",)
PACKED = ("actor_rollout_ref.model.use_remove_padding=true", "critic.model.use_remove_padding=true")
# Budgets over the default data lengths (16 + 6 tokens); the test batch's rows hold 6-9 tokens, so
# micro-batches hold 2-3 rows (against 4 rows in the fixed path) and differ in size.
DYNAMIC = (
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=22",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=30",
    "critic.use_dynamic_bsz=true",
    "critic.ppo_max_token_len_per_gpu=22",
    "critic.forward_max_token_len_per_gpu=30",
)


@pytest.fixture(scope="module")
def padded(tmp_path_factory):
    """The tiny model (4 layers, so pipeline stages split it) and its padded single-process run."""
    root = tmp_path_factory.mktemp("padding_free")
    model_path = tiny(root / "m", num_hidden_layers=4)
    run_ranks(train_on_rank, 1, model_path, str(root), VALUES)
    return model_path, root


@pytest.mark.parametrize(
    "world,layout",
    [
        pytest.param(1, PACKED, id="packed"),
        pytest.param(1, DYNAMIC, id="dynamic"),
        pytest.param(2, PACKED + DYNAMIC, id="fsdp2-packed-dynamic"),
        pytest.param(2, megatron(tp=2, sp=True) + PACKED, id="tp2-sp-packed"),
        pytest.param(2, megatron(pp=2) + PACKED + DYNAMIC, id="pp2-packed-dynamic"),
        pytest.param(1, FUSED, id="fused"),
        pytest.param(
            2, FUSED + PACKED + DYNAMIC + ("actor_rollout_ref.actor.entropy_checkpointing=true",), id="fsdp2-all"
        ),
    ],
)
def test_matches_the_padded_fixed_row_path(tmp_path, padded, world, layout):
    model_path, single = padded
    run_ranks(train_on_rank, world, model_path, str(tmp_path), VALUES + layout)
    for role in ("actor", "critic"):
        _close(load_file(single / f"{role}_rank0.safetensors"), load_file(tmp_path / f"{role}_rank0.safetensors"))
    one = torch.load(single / "result_dp0.pt")
    many = [torch.load(path) for path in sorted(tmp_path.glob("result_dp*.pt"))]
    mask = make_batch(8).tensors["response_mask"].bool()  # log-probs past a response's end are not defined
    assert one["values"].abs().max() > 1e-3
    log_probs = torch.cat([m["old_log_probs"] for m in many])
    torch.testing.assert_close(log_probs[mask], one["old_log_probs"][mask], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat([m["values"] for m in many]), one["values"], rtol=1e-5, atol=1e-6)
    # The loss metrics are the whole mini-batch's, however it was cut into micro-batches and replicas.
    for key in ("pg", "vf"):
        torch.testing.assert_close(sum(m[key] for m in many) / len(many), one[key], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(many[0]["grad_norm"], one["grad_norm"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20"],
            r"actor_rollout_ref.actor.ppo_max_token_len_per_gpu=20 is shorter than the longest sequence .* = 22",
        ),
        (
            ["critic.use_dynamic_bsz=true", "critic.forward_max_token_len_per_gpu=8"],
            r"critic.forward_max_token_len_per_gpu=8 is shorter",
        ),
        (
            [
                "resource_pool.pools.global_pool.GPU=2",
                "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
                *megatron(pp=2),
            ],
            r"pipeline parallel \(pp_size=2\) need actor_rollout_ref.model.use_remove_padding=true",
        ),
        (
            [
                "resource_pool.pools.global_pool.GPU=2",
                "critic.model.use_remove_padding=true",
                "critic.parallel_config.megatron.pp_microbatches=2",
                *megatron(pp=2),
            ],
            r"drop parallel_config.megatron.pp_microbatches",
        ),
    ],
)
def test_bad_budgets_are_refused_before_launch(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_and_check(overrides)


def test_fused_kernels_on_megatron_fall_back_to_logits_with_a_warning(caplog):
    # verl's megatron scripts set use_fused_kernels=true: the run goes on, scoring from the (vocabulary-split) logits
    with caplog.at_level("WARNING"):
        load_and_check(["actor_rollout_ref.model.use_fused_kernels=true", "actor_rollout_ref.actor.strategy=megatron"])
    assert "compute log-probs from the logits" in caplog.text
