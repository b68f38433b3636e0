"""Which roles a configuration needs: derived from the algorithm, never written back into the config."""

from __future__ import annotations

from hybridrl.algorithms.advantages import get_adv_estimator
from hybridrl.config.schema import Config, RewardModelConfig, TrainedRoleConfig

# Each role with a training engine (the names used in ``resource_pool.mapping``) and the config section
# that holds its engine settings (the reference follows the actor's).
ROLE_SECTIONS = {
    "actor_rollout": "actor_rollout_ref.actor",
    "critic": "critic",
    "ref": "actor_rollout_ref.actor",
    "reward_model": "reward_model",
}
#: Generation-only workers (``resource_pool.mapping.rollout``): a generation engine, no training engine.
ROLLOUT = "rollout"
ROLES: tuple[str, ...] = (*ROLE_SECTIONS, ROLLOUT)


def engine_section(cfg: Config, role: str) -> TrainedRoleConfig | RewardModelConfig:
    """The section ``ROLE_SECTIONS[role]`` names: the role's strategy, sharding and precision."""
    if role in ("actor_rollout", "ref"):
        return cfg.actor_rollout_ref.actor
    if role == "critic":
        return cfg.critic
    if role == "reward_model":
        return cfg.reward_model
    raise KeyError(f"Unknown role '{role}'; roles: {', '.join(ROLES)}.")


def ulysses_size(cfg: Config, role: str) -> tuple[str, int]:
    """The section that sets a role's Ulysses group size (``ulysses_sequence_parallel_size``), and the size;
    the reward model has none (1)."""
    if role == "actor_rollout":
        return "actor_rollout_ref.actor", cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size
    if role == "ref":
        return "actor_rollout_ref.ref", cfg.actor_rollout_ref.ref.ulysses_sequence_parallel_size
    if role == "critic":
        return "critic", cfg.critic.ulysses_sequence_parallel_size
    return ROLE_SECTIONS[role], 1


def critic_enabled(cfg: Config) -> bool:
    if cfg.critic.enable is None:
        return get_adv_estimator(cfg.algorithm.adv_estimator).needs_critic
    return bool(cfg.critic.enable)


def ref_enabled(cfg: Config) -> bool:
    """The frozen reference policy exists only when some KL term needs it."""
    return bool(cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.actor.use_kl_loss)


def ref_in_actor(cfg: Config) -> bool:
    """With LoRA the reference policy is the actor's base model, its adapters off: the actor's workers
    compute the reference log-probs, and no reference model is built."""
    return ref_enabled(cfg) and cfg.actor_rollout_ref.model.lora_rank > 0


def active_roles(cfg: Config) -> list[str]:
    roles = ["actor_rollout"]
    if critic_enabled(cfg):
        roles.append("critic")
    if ref_enabled(cfg) and not ref_in_actor(cfg):
        roles.append("ref")
    if cfg.reward_model.enable:
        roles.append("reward_model")
    if ROLLOUT in cfg.resource_pool.mapping:
        roles.append(ROLLOUT)
    return roles


def engine_roles(cfg: Config) -> list[str]:
    """The active roles that hold a training engine (all but the generation-only workers)."""
    return [role for role in active_roles(cfg) if role in ROLE_SECTIONS]
