"""Pure tensor functions for PPO-style RL post-training (advantages, losses, KL, filtering)."""

from hybridrl.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvEstimator,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator,
    register_adv_estimator,
)
from hybridrl.algorithms.filtering import groups_with_signal
from hybridrl.algorithms.kl_control import (
    KL_CONTROLLERS,
    KL_PENALTIES,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)
from hybridrl.algorithms.losses import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    agg_loss,
    compute_kl_loss,
    compute_policy_loss,
    compute_policy_loss_gspo,
    compute_value_loss,
    get_policy_loss,
)
from hybridrl.algorithms.token_logprobs import entropy_from_logits, log_probs_from_logits
from hybridrl.algorithms.utils import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "ADV_ESTIMATORS",
    "AdvEstimator",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "get_adv_estimator",
    "register_adv_estimator",
    "groups_with_signal",
    "KL_CONTROLLERS",
    "AdaptiveKLController",
    "FixedKLController",
    "KLController",
    "apply_kl_penalty",
    "make_kl_controller",
    "KL_PENALTIES",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "agg_loss",
    "compute_kl_loss",
    "compute_policy_loss",
    "compute_policy_loss_gspo",
    "compute_value_loss",
    "entropy_from_logits",
    "get_policy_loss",
    "kl_penalty",
    "log_probs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
]
