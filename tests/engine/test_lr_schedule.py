"""Learning-rate warm-up and schedules: verl's keys and meaning."""

from __future__ import annotations

import math

import pytest
import torch

from hybridrl.config.schema import OptimConfig
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.lr_schedule import LRSchedule


def schedule(total=10, **optim):
    return LRSchedule.from_config(OptimConfig(**optim), total)


def test_constant_with_warmup_steps_or_ratio():
    assert [schedule(lr_warmup_steps=4).factor(s) for s in range(6)] == [0, 0.25, 0.5, 0.75, 1, 1]
    assert schedule(lr_warmup_steps_ratio=0.3).warmup_steps == 3  # of trainer.total_steps
    assert schedule(lr_warmup_steps=2, lr_warmup_steps_ratio=0.9).warmup_steps == 2  # steps win when > 0
    assert schedule(lr_warmup_steps_ratio=0.5, total_training_steps=4).warmup_steps == 2
    assert all(schedule().factor(s) == 1 for s in range(10))  # the default: constant, no warm-up


@pytest.mark.parametrize("style_key", ["lr_scheduler_type", "warmup_style"])
def test_cosine_decays_to_the_floor(style_key):
    s = schedule(total=12, lr_warmup_steps=2, min_lr_ratio=0.2, **{style_key: "cosine"})
    assert s.factor(1) == 0.5 and s.factor(2) == 1.0
    assert s.factor(7) == pytest.approx(0.2 + 0.8 * 0.5)  # half-way through the decay
    assert s.factor(12) == pytest.approx(0.2) and s.factor(40) >= 0.2
    full_wave = schedule(total=10, lr_scheduler_type="cosine", num_cycles=1.0)
    assert full_wave.factor(5) == pytest.approx(0.0, abs=1e-12) and full_wave.factor(10) == pytest.approx(1.0)
    assert all(0 <= s.factor(k) <= 1 for k in range(13)) and not math.isnan(s.factor(0))


def test_engine_steps_once_per_training_step_and_resumes_from_the_config_lr():
    model = torch.nn.Linear(4, 2)
    engine = TrainEngine(model, torch.device("cpu"), optim_cfg=OptimConfig(lr=0.1))
    engine.set_lr_schedule(schedule(lr_warmup_steps=4))
    assert engine.lr == 0.0
    engine.advance_lr()
    engine.advance_lr()
    assert engine.lr == pytest.approx(0.05) and engine.lr_step == 2
    engine.optimizer.param_groups[0]["lr"] = 7.0  # what a checkpoint's param_groups would restore
    engine.set_lr_step(3)
    assert engine.lr == pytest.approx(0.075)
