"""The embedded default run's own settings.

The schema's defaults are verl's, for real models (a learning rate of 1e-6, one sample per prompt, no
KL in the reward, ...). With them the built-in tiny model would not learn the built-in task within the
default run's minutes, so when ``actor_rollout_ref.model.path`` is null these values sit between the
schema's defaults and the user's config: a user's own setting still wins, and ``hybridrl config show``
prints the result. docs/CONFIG.md lists them.
"""

from __future__ import annotations

from typing import Any

_TINY_OPTIM = {"lr": 1.0e-3, "betas": [0.9, 0.99], "weight_decay": 0.0}

# GRPO, 16 prompts x 8 samples a step, 3 epochs of 2 optimizer steps each: of the candidates swept over seeds
# 1-3 (docs/TUNING.md, "The default run's preset"; bench/default_run.py) the one that rises and stays up on
# every seed on the AVX-512 EPYC where 2 epochs did not (2 epochs did on the other kind of CPU CI has run on,
# where 3 were not measured), in about 75 s. The critic's settings stay for runs that choose gae.
#
# LoRA (model.lora_rank > 0) also adapts the output head: the tiny model's head and embeddings are random, and
# with them frozen its adapted decoder layers do not learn the task (docs/TUNING.md, "LoRA"). A real model's
# head is trained and large (vocabulary x hidden), which is why PEFT's all-linear leaves it out.
TINY_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]

TINY_RUN: dict[str, Any] = {
    "data": {"train_batch_size": 16},
    "actor_rollout_ref": {
        "model": {"target_modules": TINY_LORA_TARGETS},
        "actor": {
            "optim": _TINY_OPTIM,
            "ppo_epochs": 3,
            "ppo_mini_batch_size": 8,
            "ppo_micro_batch_size_per_gpu": 32,
            "fsdp": {"sharding_strategy": "NO_SHARD"},
        },
        "rollout": {"n": 8},
    },
    "critic": {
        "optim": _TINY_OPTIM,
        "ppo_micro_batch_size_per_gpu": 32,
        "fsdp": {"sharding_strategy": "NO_SHARD"},
    },  # ppo_epochs follows the actor's
    "algorithm": {"adv_estimator": "grpo", "lam": 0.95, "use_kl_in_reward": True},
    "trainer": {"val_before_train": False},
}
