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
    the pass (or, overlapped, the behaviour policy's log-probs: its weights are then 1). Fully asynchronous
    training follows ``async_training.use_rollout_log_probs`` and ``compute_prox_log_prob``."""
    asynchronous = cfg.async_training
    if asynchronous.enable:  # verl's fully async keys: the behaviour policy's, or the proximal policy's pass
        if asynchronous.compute_prox_log_prob or not asynchronous.use_rollout_log_probs:
            return OldLogProbs.PASS
        return OldLogProbs.ROLLOUT
    if overlapped:
        return OldLogProbs.ROLLOUT
    if not old_log_prob_pass_needed(cfg):
        return OldLogProbs.UPDATE
    if rollout_exact and cfg.algorithm.rollout_correction.rollout_is is None:
        return OldLogProbs.ROLLOUT
    return OldLogProbs.PASS


def importance_level(cfg: Config) -> str | None:
    """The rollout-correction weights' level: ``algorithm.rollout_correction.rollout_is``, or per token for AReaL's
    decoupled PPO (``async_training.compute_prox_log_prob``: the ratio against the proximal policy's pass, each
    token weighted by min(pi_prox / pi_behaviour, threshold)); None = no weights."""
    level = cfg.algorithm.rollout_correction.rollout_is
    if level is not None:
        return str(level.value)
    if cfg.async_training.enable and cfg.async_training.compute_prox_log_prob:
        return "token"
    return None
