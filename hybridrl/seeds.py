"""Every seed the run derives from ``trainer.seed`` / ``data.seed``, named, in one place.

The multipliers are distinct primes so that derived streams (steps, rounds, ranks, epochs) never collide
for realistic counts. Changing one changes what a run samples: resume tests compare runs bitwise.
"""

from __future__ import annotations


def step_seed(seed: int, step: int) -> int:
    """The step's seed: PPO mini-batch shuffling in the updates."""
    return seed * 1_000_003 + step


def rollout_seed(seed: int, step: int, round_: int) -> int:
    """One generation round of a step (DAPO's dynamic sampling runs several)."""
    return step_seed(seed, step) * 101 + round_


def critic_update_seed(step_seed_: int) -> int:
    """The critic shuffles its mini-batches apart from the actor."""
    return step_seed_ + 1


def rank_sampling_seed(batch_seed: int, rank: int) -> int:
    """Each rank samples its own shard with its own stream."""
    return batch_seed * 1009 + rank


def request_seed(batch_seed: int, row: int) -> int:
    """One row of a generation, for engines that seed each request (vLLM, SGLang): rows and steps must not
    share a sampling stream."""
    return (batch_seed * 1_000_003 + row) % (2**31 - 1)


def validation_seed(seed: int, first_row: int) -> int:
    """Fixed per validation chunk: the same prompts get the same samples at every validation."""
    return seed * 7_919 + first_row


def held_out_seed(data_seed: int) -> int:
    """The built-in task's validation prompts, generated apart from the training prompts."""
    return data_seed + 7_919


def epoch_shuffle_seed(data_seed: int, epoch: int) -> int:
    """The order of the training prompts in one epoch."""
    return data_seed * 100_003 + epoch


def turn_seed(batch_seed: int, row: int, turn: int) -> int:
    """One model turn of one sample in a multi-turn rollout: its own stream whatever samples share the call."""
    return request_seed(batch_seed * 613 + turn, row)
