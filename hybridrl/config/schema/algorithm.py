"""The algorithm: advantage estimation, the KL penalty and its controller, DAPO's group filter, and the
correction for the gap between the generation engine's and the trainer's log-probs."""

from __future__ import annotations

from dataclasses import dataclass

from hybridrl.config.choices import KLControlType, KLPenalty, RolloutCorrection
from hybridrl.config.schema.fields import at_least, doc, positive, section


@dataclass(frozen=True)
class KLControlConfig:
    type: KLControlType = doc(KLControlType.fixed, "fixed | adaptive (Ziegler et al. 2019)")
    kl_coef: float = doc(0.001, "(initial) KL coefficient")
    target_kl: float = doc(0.1, "adaptive: KL the controller steers to")
    horizon: int = doc(10000, "adaptive: samples over which the coefficient adapts")

    def problems(self, at: str) -> list[str]:
        return positive(at, horizon=self.horizon, target_kl=self.target_kl) + at_least(
            0, at, " (0 = no KL term)", kl_coef=self.kl_coef
        )


@dataclass(frozen=True)
class FilterGroupsConfig:
    enable: bool = doc(False, "drop prompt groups whose rewards are all equal; sample more to refill")
    metric: str | None = doc(
        None,
        "the per-sequence value whose spread keeps a group (verl's): seq_final_reward | seq_reward (the score with "
        "penalties), score, or a key the reward function returns in its dict (e.g. acc); null = seq_reward",
    )
    max_num_gen_batches: int = doc(
        4, "most generation rounds per step; then the batch is topped up with dropped groups"
    )

    def problems(self, at: str) -> list[str]:
        if self.max_num_gen_batches < 1:
            return [f"{at}.max_num_gen_batches ({self.max_num_gen_batches}) must be >= 1."]
        return []


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    rollout_is: RolloutCorrection | None = doc(
        None,
        "null = off; token | sequence: weigh each token's policy loss by min(pi_old / pi_rollout, threshold), the "
        "ratio taken per token or over the whole response",
    )
    rollout_is_threshold: float = doc(2.0, "upper bound of the importance weights (truncated importance sampling)")


@dataclass(frozen=True)
class AlgorithmConfig:
    adv_estimator: str = doc("gae", "gae | grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax")
    norm_adv_by_std_in_grpo: bool = doc(True, "grpo: divide by the group's std; false = Dr.GRPO (Liu et al. 2025)")
    gamma: float = doc(1.0, "discount")
    lam: float = doc(1.0, "GAE lambda")
    use_kl_in_reward: bool = doc(False, "subtract kl_coef * KL(policy || reference) from the token rewards")
    kl_penalty: KLPenalty = doc(KLPenalty.kl, "KL estimator: kl/k1, abs, mse/k2, low_var_kl/k3")
    kl_ctrl: KLControlConfig = section(KLControlConfig)
    filter_groups: FilterGroupsConfig = section(FilterGroupsConfig, "DAPO dynamic sampling (Yu et al. 2025)")
    rollout_correction: RolloutCorrectionConfig = section(
        RolloutCorrectionConfig, "truncated importance sampling for the rollout-vs-trainer log-prob gap"
    )

    def problems(self, at: str) -> list[str]:
        problems = []
        if not 0 <= self.gamma <= 1 or not 0 <= self.lam <= 1:
            problems.append(f"{at}.gamma={self.gamma} and {at}.lam={self.lam} must lie in [0, 1].")
        return problems + self.kl_ctrl.problems(f"{at}.kl_ctrl") + self.filter_groups.problems(f"{at}.filter_groups")
