"""The tiny model most multi-rank tests train: one spelling of its sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridrl.models.tiny import ensure_tiny_model

SIZES = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64, seed=0
)


def tiny(directory: str | Path, **overrides: Any) -> str:
    """The tiny Qwen2 model and tokenizer in ``directory`` (written once), with ``overrides`` of its sizes."""
    return ensure_tiny_model(directory, **{**SIZES, **overrides})


# The built-in run with a critic, shaped as the default run was before it became GRPO (32 prompts x 4 samples,
# mini-batches of 16, 2 epochs): for the runs whose point is a critic (PPO's GAE), and whose figures were set
# on it.
GAE_RUN = [
    "algorithm.adv_estimator=gae",
    "data.train_batch_size=32",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_epochs=2",
]
