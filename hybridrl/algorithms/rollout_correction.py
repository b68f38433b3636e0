"""The gap between the rollout engine's log-probs and the trainer's, and the truncated importance
weights that correct for it (Yao et al. 2025, "Your efficient RL framework secretly brings you
off-policy RL training"; verl's ``algorithm.rollout_correction``).

The rollout engine samples from pi_rollout (its own kernels, dtype, KV cache); the trainer's old log-probs
are pi_old's. Where they differ, the PPO ratio pi / pi_old is taken against the wrong behaviour policy; a
weight min(pi_old / pi_rollout, C) per token (or per response) puts it back, truncated so that one rare
token cannot dominate a batch.
"""

from __future__ import annotations

import torch

from hybridrl.algorithms.utils import masked_mean

# log-ratios beyond this are clamped before exp: the weight is truncated far below e**20 anyway
_LOG_RATIO_BOUND = 20.0


def rollout_probs_diff(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """verl's ``training/rollout_probs_diff_*``: |p_trainer - p_rollout| over the response tokens, in
    probability (not log) space, so that a gap on a token nobody samples counts for little."""
    # old_log_probs, rollout_log_probs, mask: (B, R)
    valid = mask.bool()
    diff = (old_log_probs.float().exp() - rollout_log_probs.float().exp()).abs()[valid]
    if diff.numel() == 0:
        return {}
    return {
        "training/rollout_probs_diff_max": float(diff.max()),
        "training/rollout_probs_diff_mean": float(diff.mean()),
        "training/rollout_probs_diff_std": float(diff.std()) if diff.numel() > 1 else 0.0,
    }


def rollout_is_weights(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """(B, R) weights min(pi_old / pi_rollout, threshold), 0 on padding: per token (``token``: biased,
    low variance) or the product over the response (``sequence``: unbiased, high variance), and their
    statistics before truncation."""
    # old_log_probs, rollout_log_probs, mask: (B, R)
    valid = mask.float()
    log_ratio = (old_log_probs.float() - rollout_log_probs.float()) * valid
    if level == "token":
        raw = log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND).exp()
    elif level == "sequence":
        per_row = log_ratio.sum(-1, keepdim=True).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)  # (B, 1)
        raw = per_row.exp().expand_as(log_ratio)
    else:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={level!r}: use token, sequence or null")
    raw = raw * valid
    metrics = {
        "rollout_corr/rollout_is_mean": float(masked_mean(raw, valid)),
        "rollout_corr/rollout_is_max": float(raw[valid.bool()].max()) if valid.any() else 0.0,
        "rollout_corr/rollout_is_truncated_frac": float(masked_mean((raw > threshold).float(), valid)),
    }
    return raw.clamp(max=threshold).detach(), metrics
