"""Pure tensor functions for PPO-style RL post-training (advantages, losses, KL)."""

from hybridrl.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvEstimator,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    get_adv_estimator,
    register_adv_estimator,
)
from hybridrl.algorithms.kl_control import (
    KL_CONTROLLERS,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    make_kl_controller,
)
from hybridrl.algorithms.losses import (
    KL_PENALTIES,
    LOSS_AGG_MODES,
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    kl_penalty,
    log_probs_from_logits,
)
from hybridrl.algorithms.utils import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "ADV_ESTIMATORS",
    "AdvEstimator",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "get_adv_estimator",
    "register_adv_estimator",
    "KL_CONTROLLERS",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "apply_kl_penalty",
    "make_kl_controller",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "agg_loss",
    "compute_policy_loss",
    "compute_value_loss",
    "entropy_from_logits",
    "kl_penalty",
    "log_probs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
