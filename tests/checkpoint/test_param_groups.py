"""Optimizer parameter groups across layouts: Megatron-style layouts split their parameters by tensor type
(one multi-tensor AdamW call cannot mix DTensors with plain tensors), FSDP and one process keep one group, and
a checkpoint of one restores into the other."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hybridrl.checkpoint.shards import restore_hyperparameters
from hybridrl.engine.base import optimizer_groups


def test_parameters_are_grouped_by_tensor_type_in_their_order() -> None:
    weight, bias, plain = nn.Parameter(torch.ones(2, 2)), nn.Parameter(torch.ones(2)), torch.ones(3)
    groups = optimizer_groups([weight, plain, bias])
    assert [[id(p) for p in g["params"]] for g in groups] == [[id(weight), id(bias)], [id(plain)]]
    assert len(optimizer_groups([weight, bias])) == 1


def _optimizer(groups: int) -> torch.optim.AdamW:
    params = [{"params": [nn.Parameter(torch.ones(2))]} for _ in range(groups)]
    return torch.optim.AdamW(params, lr=1.0, betas=(0.9, 0.999), foreach=True)


def test_one_saved_group_restores_into_two_and_back() -> None:
    saved = [{"params": ["a.weight"], "lr": 0.25, "betas": [0.5, 0.75], "foreach": False}]
    two = _optimizer(2)
    restore_hyperparameters(two.param_groups, saved)
    assert [(g["lr"], g["betas"], g["foreach"]) for g in two.param_groups] == [(0.25, (0.5, 0.75), True)] * 2
    one = _optimizer(1)
    restore_hyperparameters(one.param_groups, [{"lr": 0.5, "betas": [0.5, 0.5]}] * 2)
    assert one.param_groups[0]["lr"] == 0.5


def test_saved_groups_with_different_settings_do_not_restore_into_another_count() -> None:
    saved = [{"lr": 0.25}, {"lr": 0.5}]
    with pytest.raises(ValueError, match="2 optimizer parameter groups with different settings"):
        restore_hyperparameters(_optimizer(1).param_groups, saved)
    same_count = _optimizer(2)
    restore_hyperparameters(same_count.param_groups, saved)  # the same layout: group by group
    assert [g["lr"] for g in same_count.param_groups] == [0.25, 0.5]
