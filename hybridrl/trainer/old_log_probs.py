"""Where a step's old log-probs (the PPO ratio's denominator, and the KL penalty's policy term) come from.

A separate forward pass over the rollouts is what verl always runs. Two cheaper sources give the same
numbers: the update's own forward, when the update is exactly on-policy, and the generation engine's
log-probs of the tokens it sampled, when it computes them as the trainer does (Hugging Face ``generate``
on the same weights in fp32, at the same temperature). A rollout generated one step behind the weights it
trains (``rollout.overlap``) must use the engine's: they are the behaviour policy's.
"""

from __future__ import annotations

import enum

from hybridrl.config.schema import Config


class OldLogProbs(enum.Enum):
    UPDATE = "taken from the update's own forward (one epoch, one mini-batch: exactly on-policy; no separate pass)"
    ROLLOUT = "the generation engine's log-probs of the sampled tokens (no separate pass)"
    PASS = "a separate forward pass before the update"


def old_log_prob_pass_needed(cfg: Config) -> bool:
    """False when the update is exactly on-policy (one epoch, one mini-batch: every micro-batch sees the
    weights that generated the rollouts) and nothing reads the old log-probs before the update (KL in the
    reward, rollout correction); the update then takes them from its own forward, detached, as
    single-process trainers do, and the PPO ratio is exactly 1."""
    actor = cfg.actor_rollout_ref.actor
    one_mini_batch = actor.ppo_mini_batch_size >= cfg.data.train_batch_size
    needed_before = cfg.algorithm.use_kl_in_reward or cfg.algorithm.rollout_correction.rollout_is is not None
    return not (actor.ppo_epochs == 1 and one_mini_batch and not needed_before)


def old_log_prob_source(cfg: Config, rollout_exact: bool, overlapped: bool = False) -> OldLogProbs:
    """``rollout_exact``: the generation engine's log-probs equal the trainer's up to float rounding
    (``ActorRolloutRole.rollout_log_probs_exact``). Rollout correction wants the two apart, so it keeps
    the pass (or, overlapped, the behaviour policy's log-probs: its weights are then 1)."""
    if overlapped:
        return OldLogProbs.ROLLOUT
    if not old_log_prob_pass_needed(cfg):
        return OldLogProbs.UPDATE
    if rollout_exact and cfg.algorithm.rollout_correction.rollout_is is None:
        return OldLogProbs.ROLLOUT
    return OldLogProbs.PASS
