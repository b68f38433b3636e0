"""Which roles a configuration needs: derived from the algorithm, never written back into the config."""

from __future__ import annotations

from typing import Any

# The config section that holds each role's engine settings (the reference follows the actor's).
ROLE_SECTIONS = {
    "actor_rollout": "actor_rollout_ref.actor",
    "ref": "actor_rollout_ref.actor",
    "critic": "critic",
    "reward_model": "reward_model",
}


def critic_enabled(cfg: Any) -> bool:
    from hybridrl.algorithms.advantages import get_adv_estimator

    if cfg.critic.enable is None:
        return get_adv_estimator(cfg.algorithm.adv_estimator).needs_critic
    return bool(cfg.critic.enable)


def ref_enabled(cfg: Any) -> bool:
    """The frozen reference policy exists only when some KL term needs it."""
    return bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)


def active_roles(cfg: Any) -> list[str]:
    roles = ["actor_rollout"]
    if critic_enabled(cfg):
        roles.append("critic")
    if ref_enabled(cfg):
        roles.append("ref")
    if cfg.reward_model.enable:
        roles.append("reward_model")
    return roles
