"""Which dtype each weight copy takes: ``auto`` resolves by role and device, an explicit value wins."""

from __future__ import annotations

import torch

from hybridrl.config.choices import DType, Precision
from hybridrl.engine.dtypes import rollout_dtype, weights_dtype
from hybridrl.models.loader import empty_causal_lm, load_causal_lm
from hybridrl.models.weights import load_weights, materialize
from tests.tiny_models import tiny

CPU, GPU = torch.device("cpu"), torch.device("cuda")


def test_auto_dtypes_follow_role_and_device():
    assert weights_dtype(DType.auto, trained=True, device=GPU) == torch.float32  # fp32 masters
    assert weights_dtype(DType.auto, trained=False, device=GPU) == torch.bfloat16  # frozen ref / RM
    assert weights_dtype(DType.auto, trained=False, device=CPU) == torch.float32
    assert weights_dtype(DType.bfloat16, trained=True, device=CPU) == torch.bfloat16
    assert rollout_dtype(DType.auto, Precision.fp32, GPU) == torch.bfloat16
    assert rollout_dtype(DType.auto, Precision.fp32, CPU) == torch.float32
    assert rollout_dtype(DType.auto, Precision.bf16, CPU) == torch.bfloat16
    assert rollout_dtype(DType.float16, Precision.bf16, GPU) == torch.float16


def test_weights_load_into_the_asked_dtype(tmp_path):
    path = tiny(str(tmp_path / "tiny"))
    model, weights = empty_causal_lm(path, dtype=torch.bfloat16)
    load_weights(materialize(model, CPU), weights)
    reference = load_causal_lm(path).state_dict()
    for name, tensor in model.state_dict().items():
        assert tensor.dtype == torch.bfloat16 or not tensor.is_floating_point() or "inv_freq" in name
        assert torch.equal(tensor, reference[name].to(tensor.dtype)), name
