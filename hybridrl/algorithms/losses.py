"""PPO losses: loss aggregation, the policy losses, the value loss and the KL loss term.

Per-token log-probs and entropy from logits are in ``token_logprobs``, the KL estimators in ``kl_control``.

All ``[B, T]`` tensors cover response tokens with ``response_mask`` (1 = real
token, 0 = padding at the end of a row). Padded positions are selected out
before any arithmetic whose gradient could see them, so garbage (even NaN) in
padding never reaches the loss or its gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hybridrl.algorithms.kl_control import kl_penalty
from hybridrl.algorithms.utils import LOG_RATIO_CLAMP, masked_mean, masked_sum

__all__ = [
    "LOSS_AGG_MODES",
    "agg_loss",
    "POLICY_LOSSES",
    "compute_policy_loss",
    "compute_policy_loss_gspo",
    "compute_policy_loss_cispo",
    "compute_policy_loss_geo_mean",
    "get_policy_loss",
    "compute_kl_loss",
    "compute_value_loss",
]


# --------------------------------------------------------------------------- #
# Loss aggregation
# --------------------------------------------------------------------------- #


def _token_mean(loss_mat: torch.Tensor, loss_mask: torch.Tensor, scale: float | None) -> torch.Tensor:
    # Every valid token in the batch weighs the same.
    return masked_mean(loss_mat, loss_mask)


def _nonempty_rows(loss_mask: torch.Tensor) -> torch.Tensor:
    return (loss_mask.sum(dim=-1) > 0).to(torch.float32)  # [B]


def _seq_mean_token_sum(loss_mat: torch.Tensor, loss_mask: torch.Tensor, scale: float | None) -> torch.Tensor:
    # Each sequence contributes its summed token loss; mean over non-empty rows.
    seq_losses = masked_sum(loss_mat, loss_mask, dim=-1)  # [B]
    return masked_mean(seq_losses, _nonempty_rows(loss_mask))


def _seq_mean_token_mean(loss_mat: torch.Tensor, loss_mask: torch.Tensor, scale: float | None) -> torch.Tensor:
    # Each sequence weighs the same regardless of its length.
    seq_losses = masked_mean(loss_mat, loss_mask, dim=-1)  # [B]
    return masked_mean(seq_losses, _nonempty_rows(loss_mask))


def _seq_mean_token_sum_norm(loss_mat: torch.Tensor, loss_mask: torch.Tensor, scale: float | None) -> torch.Tensor:
    # Dr. GRPO: token sum divided by a constant (default: padded length T), so
    # long responses are not down-weighted per token.
    norm = float(loss_mask.shape[-1]) if scale is None else float(scale)
    seq_losses = masked_sum(loss_mat, loss_mask, dim=-1) / norm  # [B]
    return masked_mean(seq_losses, _nonempty_rows(loss_mask))


LOSS_AGG_MODES: dict[str, Callable[[torch.Tensor, torch.Tensor, float | None], torch.Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-sum": _seq_mean_token_sum,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def loss_units(loss_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """What ``agg_loss`` averages over in ``mode``: valid tokens (token-mean) or non-empty rows (the
    seq-mean modes). Weighing micro-batches by their units makes the sum of their losses equal the
    loss of the whole mini-batch, however ragged the micro-batches are."""
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid names: {sorted(LOSS_AGG_MODES)}")
    if mode == "token-mean":
        return loss_mask.sum().to(torch.float32)
    return _nonempty_rows(loss_mask).sum()


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar (verl ``loss_agg_mode`` semantics).

    - ``token-mean``: sum over valid tokens / number of valid tokens.
    - ``seq-mean-token-sum``: mean over non-empty rows of the row's token sum.
    - ``seq-mean-token-mean``: mean over non-empty rows of the row's token mean.
    - ``seq-mean-token-sum-norm``: mean over non-empty rows of (row token sum / T),
      T = ``loss_mask.shape[-1]`` unless ``loss_scale_factor`` is given (pass a
      fixed max response length so the scale does not vary with batch padding).
    """
    try:
        fn = LOSS_AGG_MODES[mode]
    except KeyError:
        raise ValueError(f"unknown loss_agg_mode {mode!r}; valid names: {sorted(LOSS_AGG_MODES)}") from None
    return fn(loss_mat, loss_mask, loss_scale_factor)


# --------------------------------------------------------------------------- #
# PPO policy / value losses
# --------------------------------------------------------------------------- #


def _clipped_surrogate(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    valid: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token clipped (optionally dual-clipped) loss [B, T], clipfrac, clipfrac_lower."""
    # ratio, adv, valid: [B, T]; adv already zero at padding and detached
    pg_losses1 = -adv * ratio  # [B, T]
    pg_losses2 = -adv * torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)  # [B, T]
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).to(ratio.dtype), valid)

    if clip_ratio_c is not None:
        pg_losses3 = -adv * clip_ratio_c  # [B, T]
        clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)
        negative = adv < 0
        pg_losses = torch.where(negative, clip_pg_losses2, clip_pg_losses1)
        lower = torch.gt(clip_pg_losses1, pg_losses3) & negative
        pg_clipfrac_lower = masked_mean(lower.to(ratio.dtype), valid)
    else:
        pg_losses = clip_pg_losses1
        pg_clipfrac_lower = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    return pg_losses, pg_clipfrac, pg_clipfrac_lower


def _policy_loss_outputs(
    pg_losses: torch.Tensor,
    pg_clipfrac: torch.Tensor,
    pg_clipfrac_lower: torch.Tensor,
    log_ratio: torch.Tensor,
    valid: torch.Tensor,
    loss_agg_mode: str,
    is_weights: torch.Tensor | None,
) -> dict[str, torch.Tensor]:
    """The keys every policy loss returns: the aggregated loss (with grad) and detached diagnostics.
    ``is_weights`` (B, T): rollout-correction weights on each token's loss (``rollout_correction``)."""
    if is_weights is not None:
        pg_losses = pg_losses * is_weights.to(pg_losses.dtype)
    return {
        "pg_loss": agg_loss(pg_losses, valid, loss_agg_mode),
        "pg_clipfrac": pg_clipfrac.detach(),
        "ppo_kl": masked_mean(-log_ratio, valid).detach(),
        "pg_clipfrac_lower": pg_clipfrac_lower.detach(),
    }


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """PPO clipped surrogate (Schulman et al. 2017), optionally dual-clipped (Ye et al. 2020).

    ratio = exp(clamp(log_prob - old_log_prob, -20, 20));
    loss = max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high)); with
    ``clip_ratio_c`` (> 1) the loss of tokens with A < 0 is further capped at
    -A * clip_ratio_c, so a huge ratio on a bad token cannot dominate.

    Returns ``pg_loss`` (scalar, differentiable) and detached scalar metrics
    ``pg_clipfrac`` (share of valid tokens where the clipped term is active),
    ``ppo_kl`` (masked mean of old - new log-prob), ``pg_clipfrac_lower``
    (share where the dual-clip cap is active; 0 without dual-clip).
    """
    # old_log_prob, log_prob, advantages, response_mask: [B, T]
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
    valid = response_mask.to(log_prob.device).bool()  # [B, T]
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    adv = torch.where(valid, advantages.to(log_prob.dtype), zero).detach()  # [B, T]
    log_ratio = torch.where(valid, log_prob - old_log_prob.detach(), zero)  # [B, T]
    log_ratio = torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)  # [B, T]; 1 at padding

    pg_losses, pg_clipfrac, pg_clipfrac_lower = _clipped_surrogate(
        ratio, adv, valid, clip_ratio_low, clip_ratio_high, clip_ratio_c
    )
    return _policy_loss_outputs(pg_losses, pg_clipfrac, pg_clipfrac_lower, log_ratio, valid, loss_agg_mode, is_weights)


def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 3e-4,
    clip_ratio_high: float = 4e-4,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """GSPO (Zheng et al. 2025, Group Sequence Policy Optimization): sequence-level ratio.

    s_i = exp(mean over row i's valid tokens of (log_prob - old_log_prob)), the
    length-normalised sequence likelihood ratio, which matches the sequence-level
    reward and is far less noisy than per-token ratios. Per token (GSPO-token):
    s_i,t = sg[s_i] * exp(log_prob_t - sg[log_prob_t]), whose value is s_i and
    whose gradient w.r.t. log_prob_t is s_i; summed over the row's |y_i| tokens
    this equals the true gradient of s_i (s_i / |y_i| per token), so every
    aggregation mode (each weighs a row's tokens equally) differentiates the
    sequence-level objective. The default ``seq-mean-token-mean`` is GSPO's own
    weighting (each sequence counts once, whatever its length). The clipped
    surrogate is PPO's, applied to s_i,t; the clip ranges are arguments (the
    defaults are the paper's tiny 3e-4 / 4e-4). ``clip_ratio_c`` applies
    the same dual-clip cap as ``compute_policy_loss`` (not in the paper; verl's
    GSPO ignores it). The sequence log-ratio is clamped to [-20, 20] before exp.

    Returns the same keys as ``compute_policy_loss``; ``ppo_kl`` is the token-level
    masked mean of old - new log-prob.
    """
    # old_log_prob, log_prob, advantages, response_mask: [B, T]
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}")
    valid = response_mask.to(log_prob.device).bool()  # [B, T]
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    adv = torch.where(valid, advantages.to(log_prob.dtype), zero).detach()  # [B, T]
    lp = torch.where(valid, log_prob, zero)  # [B, T]; padding selected out (even NaN)
    log_ratio = torch.where(valid, lp - old_log_prob.detach(), zero)  # [B, T]

    seq_log_ratio = masked_mean(log_ratio, valid, dim=-1)  # [B]; 0 for an empty row
    seq_log_ratio = torch.clamp(seq_log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    # value: seq_log_ratio_i at every token; gradient: 1 w.r.t. its own log_prob_t
    log_seq_ratio = seq_log_ratio.detach().unsqueeze(-1) + (lp - lp.detach())  # [B, T]
    ratio = torch.exp(log_seq_ratio)  # [B, T]

    pg_losses, pg_clipfrac, pg_clipfrac_lower = _clipped_surrogate(
        ratio, adv, valid, clip_ratio_low, clip_ratio_high, clip_ratio_c
    )
    return _policy_loss_outputs(pg_losses, pg_clipfrac, pg_clipfrac_lower, log_ratio, valid, loss_agg_mode, is_weights)


def _masked_log_ratio(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """valid [B, T] bool, detached advantages and the log-prob zero at padding, and log(pi / pi_old) clamped."""
    valid = response_mask.to(log_prob.device).bool()
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    adv = torch.where(valid, advantages.to(log_prob.dtype), zero).detach()
    lp = torch.where(valid, log_prob, zero)  # padding selected out (even NaN)
    log_ratio = torch.where(valid, lp - old_log_prob.detach(), zero)
    return valid, adv, lp, torch.clamp(log_ratio, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)


def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.2,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "token-mean",
    is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """CISPO (MiniMax 2025, MiniMax-M1): clip the importance weight, not the update. Per token the loss is
    -sg(clip(ratio, 1 - low, 1 + high)) * A * log_prob, so every token keeps a gradient (PPO's clip drops
    the tokens past the range, often the rare reflective ones) and the clipped, detached weight only scales
    it. Where the ratio is inside the range the gradient equals PPO's (d ratio / d log_prob = ratio).
    ``clip_ratio_c`` has no role here (there is no unbounded term to cap); ``pg_clipfrac_lower`` is 0."""
    valid, adv, lp, log_ratio = _masked_log_ratio(old_log_prob, log_prob, advantages, response_mask)
    ratio = torch.exp(log_ratio)  # [B, T]
    weight = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high).detach()
    pg_losses = -weight * adv * lp  # [B, T]
    clipfrac = masked_mean(torch.ne(ratio, weight).to(ratio.dtype), valid)
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    return _policy_loss_outputs(pg_losses, clipfrac, zero, log_ratio, valid, loss_agg_mode, is_weights)


def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_ratio_low: float = 0.4,
    clip_ratio_high: float = 0.4,
    clip_ratio_c: float | None = None,
    loss_agg_mode: str = "seq-mean-token-mean",
    is_weights: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """GMPO (Zhao et al. 2025, Geometric-Mean Policy Optimization): each sequence's ratio is the geometric
    mean of its token ratios, exp(mean_t clip(log r_t)), so one outlier token moves it far less than it moves
    GRPO's arithmetic mean. The clip acts on log r_t in [-low, high] and, as PPO's, only where it lowers the
    objective (sign(A) * log r_t is capped). Loss per sequence: -A_i * r_i with A_i the sequence's mean
    token advantage; sequences count equally (GMPO's mean over sequences, whatever ``loss_agg_mode``).
    ``is_weights`` enter as their geometric mean per sequence. ``clip_ratio_c`` has no role here."""
    valid, adv, lp, log_ratio = _masked_log_ratio(old_log_prob, log_prob, advantages, response_mask)
    # value: the clamped log-ratio; gradient through log_prob (log_ratio's own is detached at old_log_prob)
    log_ratio_grad = torch.where(valid, lp - old_log_prob.detach(), torch.zeros_like(lp))
    sign = torch.sign(adv)
    clipped = torch.clamp(log_ratio_grad, -clip_ratio_low, clip_ratio_high)
    capped = sign * torch.minimum(sign * log_ratio_grad, sign * clipped)  # [B, T]
    seq_ratio = torch.exp(masked_mean(capped, valid, dim=-1))  # [B]
    seq_adv = masked_mean(adv, valid, dim=-1)  # [B]
    seq_loss = -seq_adv * seq_ratio  # [B]
    if is_weights is not None:
        log_w = torch.log(is_weights.to(seq_loss.dtype).clamp_min(1e-10))
        seq_loss = seq_loss * torch.exp(masked_mean(log_w, valid, dim=-1))
    # one value per sequence on each of its tokens: the per-row token mean is the sequence's loss
    pg_losses = seq_loss.unsqueeze(-1).expand_as(lp)
    hit = torch.ne(log_ratio_grad, clipped)
    clipfrac = masked_mean((hit & (adv > 0)).to(lp.dtype), valid)
    clipfrac_lower = masked_mean((hit & (adv < 0)).to(lp.dtype), valid)
    return _policy_loss_outputs(pg_losses, clipfrac, clipfrac_lower, log_ratio, valid, "seq-mean-token-mean", None)


PolicyLossFn = Callable[..., "dict[str, torch.Tensor]"]

POLICY_LOSSES: dict[str, PolicyLossFn] = {
    "vanilla": compute_policy_loss,
    "gspo": compute_policy_loss_gspo,
    "cispo": compute_policy_loss_cispo,
    "geo_mean": compute_policy_loss_geo_mean,
}


def get_policy_loss(name: str) -> PolicyLossFn:
    """Look up a policy loss by name; every entry has ``compute_policy_loss``'s signature."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {sorted(POLICY_LOSSES)}") from None


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float | None,
    loss_agg_mode: str = "token-mean",
) -> dict[str, torch.Tensor]:
    """Clipped value loss: 0.5 * max((v - R)^2, (clip(v, V_old - c, V_old + c) - R)^2).

    Clipping keeps the critic close to the values the advantages were computed
    with. With ``cliprange_value=None`` it is the plain 0.5 * (v - R)^2.
    Returns ``vf_loss`` (scalar, differentiable) and ``vf_clipfrac`` (detached
    share of valid tokens where the clipped term is the larger one).
    """
    # vpreds, returns, values, response_mask: [B, T]
    valid = response_mask.to(vpreds.device).bool()  # [B, T]
    zero = torch.zeros((), dtype=vpreds.dtype, device=vpreds.device)
    vpreds = torch.where(valid, vpreds, zero)  # [B, T]
    returns = torch.where(valid, returns.to(vpreds.dtype), zero).detach()
    values = torch.where(valid, values.to(vpreds.dtype), zero).detach()

    vf_losses1 = (vpreds - returns) ** 2  # [B, T]
    if cliprange_value is None:
        loss_mat = vf_losses1
        vf_clipfrac = torch.zeros((), dtype=vpreds.dtype, device=vpreds.device)
    else:
        vpredclipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
        vf_losses2 = (vpredclipped - returns) ** 2  # [B, T]
        loss_mat = torch.maximum(vf_losses1, vf_losses2)
        vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).to(vpreds.dtype), valid)
    vf_loss = 0.5 * agg_loss(loss_mat, valid, loss_agg_mode)
    return {"vf_loss": vf_loss, "vf_clipfrac": vf_clipfrac.detach()}


def compute_kl_loss(
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_loss_type: str,
    loss_agg_mode: str = "token-mean",
) -> torch.Tensor:
    """KL(pi || pi_ref) as an actor loss term (verl ``use_kl_loss``; GRPO, Shao et al. 2024).

    Instead of folding the KL into the reward, GRPO adds
    ``kl_loss_coef * compute_kl_loss(...)`` to the actor loss, so the penalty
    acts directly on the gradient. Per-token estimate from ``kl_penalty``
    (``kl_loss_type``: k1/kl, abs, k2/mse, k3/low_var_kl), aggregated with
    ``agg_loss``. Scalar, differentiable w.r.t. ``log_prob`` (the reference is
    detached); padding is selected out before the estimate, so NaN there
    reaches neither the value nor the gradient.
    """
    # log_prob, ref_log_prob, response_mask: [B, T]
    valid = response_mask.to(log_prob.device).bool()  # [B, T]
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    lp = torch.where(valid, log_prob, zero)  # [B, T]
    ref = torch.where(valid, ref_log_prob.to(log_prob.dtype), zero).detach()  # [B, T]
    kld = kl_penalty(lp, ref, kl_loss_type)  # [B, T]
    return agg_loss(kld, valid, loss_agg_mode)
