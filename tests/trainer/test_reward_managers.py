"""verl's reward manager names and reward_fn_key on the driver's reward step."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config.errors import ConfigError
from hybridrl.config.loader import load_config
from hybridrl.protocol import Batch
from hybridrl.rewards.scorer import RewardScorer
from hybridrl.trainer.rewarding import RewardStep, overlong_penalty


def batch(lengths, sources=None, abilities=None):
    n = len(lengths)
    mask = torch.zeros(n, 10, dtype=torch.long)
    for i, length in enumerate(lengths):
        mask[i, :length] = 1
    return Batch.from_dict(
        tensors={"response_mask": mask},
        non_tensors={
            "data_source": sources or ["copy"] * n,
            "ability": abilities or ["copy"] * n,
            "response_text": ["123"] * n,
            "ground_truth": ["123"] * n,
            "extra_info": [None] * n,
        },
    )


def step(*overrides, **kwargs):
    cfg = load_config(list(overrides))
    return RewardStep(
        cfg.reward_model,
        RewardScorer(num_workers=0),
        reward_fn_key=cfg.data.reward_fn_key,
        max_response_length=cfg.data.max_response_length,
        **kwargs,
    )


def test_dapo_penalises_only_the_overlong_tail():
    buffer = load_config(
        [
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=4",
        ]
    ).reward_model.overlong_buffer
    penalty = overlong_penalty(torch.tensor([2, 6, 8, 10]), 10, buffer)
    assert penalty.tolist() == [0.0, 0.0, -0.5, -1.0]  # free up to 10 - 4 tokens, then linear to -1 at 10


def test_the_managers_score_as_verl_names_them():
    overrides = ["data.max_response_length=10", "reward_model.overlong_buffer.len=4"]
    metrics: dict[str, float] = {}
    dapo = step(
        *overrides,
        "reward_model.reward_manager=dapo",
        "reward_model.overlong_buffer.enable=true",
        "reward_model.overlong_buffer.log=true",
    )
    assert dapo(batch([2, 10]), metrics).scores.tolist() == [1.0, 0.0]  # copy scores 1.0; -1.0 at the full length
    assert metrics["reward/overlong/mean"] == 0.5
    for manager in ("naive", "prime"):  # no length penalty
        assert step(*overrides, f"reward_model.reward_manager={manager}")(batch([2, 10])).scores.tolist() == [1.0, 1.0]
    with pytest.raises(ConfigError, match=r"reward_manager='eager' is not valid; choose one of: naive, batch, dapo"):
        load_config(["reward_model.reward_manager=eager"])
    with pytest.raises(ConfigError, match=r"overlong_buffer.enable=true needs reward_model.reward_manager=dapo"):
        load_config(["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2"])


def test_reward_fn_key_picks_the_column():
    by_ability = step("data.reward_fn_key=ability")
    assert by_ability(batch([3], sources=["no/such/source"], abilities=["copy"])).scores.tolist() == [1.0]
    with pytest.raises(ValueError, match="No reward function for data_source 'no/such/source'"):
        step()(batch([3], sources=["no/such/source"]))
    with pytest.raises(ConfigError, match=r"data.reward_fn_key='prompt': .* data_source or ability"):
        load_config(["data.reward_fn_key=prompt"])
