"""KL: the per-token estimators, the penalty coefficient's controllers and the in-reward KL penalty.

The reward given to PPO is the task score minus beta * KL(pi || pi_ref) per
token; the controller decides beta (fixed, or adapted towards a target KL as in
Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from hybridrl.algorithms.utils import LOG_RATIO_CLAMP, masked_mean

__all__ = [
    "KL_PENALTIES",
    "kl_penalty",
    "KLController",
    "FixedKLController",
    "AdaptiveKLController",
    "KL_CONTROLLERS",
    "make_kl_controller",
    "apply_kl_penalty",
]


# --------------------------------------------------------------------------- #
# KL estimators
# --------------------------------------------------------------------------- #


def _kl_k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return log_prob - ref_log_prob


def _kl_abs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - ref_log_prob).abs()


def _kl_k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_prob - ref_log_prob).square()


def _kl_k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    # Schulman's k3: unbiased, non-negative, low variance. Clamps keep a
    # runaway token from overflowing exp / dominating the penalty.
    log_ratio = torch.clamp(ref_log_prob - log_prob, min=-LOG_RATIO_CLAMP, max=LOG_RATIO_CLAMP)
    kld = torch.exp(log_ratio) - log_ratio - 1
    return torch.clamp(kld, min=-10.0, max=10.0)


KL_PENALTIES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "kl": _kl_k1,
    "k1": _kl_k1,
    "abs": _kl_abs,
    "mse": _kl_k2,
    "k2": _kl_k2,
    "low_var_kl": _kl_k3,
    "k3": _kl_k3,
}


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs, ``[B, T]``.

    Kinds: ``kl``/``k1`` (lp - ref), ``abs`` (|lp - ref|), ``mse``/``k2``
    (0.5 (lp - ref)^2), ``low_var_kl``/``k3`` (exp(ref - lp) - (ref - lp) - 1,
    clamped to [-10, 10]). Not masked: callers apply ``response_mask``.
    """
    try:
        fn = KL_PENALTIES[kind]
    except KeyError:
        raise ValueError(f"unknown kl penalty {kind!r}; valid names: {sorted(KL_PENALTIES)}") from None
    return fn(log_prob, ref_log_prob)


class KLController(Protocol):
    """What the trainer needs from a controller."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class FixedKLController:
    """Constant coefficient; ``update`` is a no-op (kept for a uniform interface)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


class AdaptiveKLController:
    """Proportional controller steering the observed KL towards ``target_kl``.

    error = clip(current_kl / target_kl - 1, -0.2, 0.2);
    value *= 1 + error * n_steps / horizon. The clip bounds how fast beta moves,
    ``horizon`` is roughly how many samples it takes to correct the error.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        if target_kl <= 0:
            raise ValueError(f"target_kl must be > 0, got {target_kl}")
        if horizon <= 0:
            raise ValueError(f"horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = float(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Scale the coefficient up if KL is above target, down if below."""
        proportional_error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        mult = 1.0 + proportional_error * n_steps / self.horizon
        self.value *= mult

    def state_dict(self) -> dict[str, Any]:
        # Only the adapted value is state; target/horizon come from the config.
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])


def _make_fixed(kl_coef: float, target_kl: float | None, horizon: float | None) -> KLController:
    return FixedKLController(kl_coef)


def _make_adaptive(kl_coef: float, target_kl: float | None, horizon: float | None) -> KLController:
    if target_kl is None or horizon is None:
        raise ValueError("adaptive KL controller needs target_kl and horizon")
    return AdaptiveKLController(kl_coef, target_kl, horizon)


KL_CONTROLLERS: dict[str, Callable[[float, float | None, float | None], KLController]] = {
    "fixed": _make_fixed,
    "adaptive": _make_adaptive,
}


def make_kl_controller(
    kind: str,
    kl_coef: float,
    target_kl: float | None = None,
    horizon: float | None = None,
) -> KLController:
    """Build a controller by name: ``fixed`` or ``adaptive``."""
    try:
        factory = KL_CONTROLLERS[kind]
    except KeyError:
        raise ValueError(f"unknown kl controller {kind!r}; valid names: {sorted(KL_CONTROLLERS)}") from None
    return factory(kl_coef, target_kl, horizon)


@torch.no_grad()
def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kind: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract beta * per-token KL from the scores, then let the controller adapt.

    current_kl is the mean over rows (with at least one valid token) of each
    row's masked-mean KL. Beta used for the rewards is the value *before* the
    update; it is what the metric ``actor/reward_kl_penalty_coeff`` reports.
    """
    # token_level_scores, old_log_prob, ref_log_prob, response_mask: [B, T]
    valid = response_mask.to(token_level_scores.device).bool()  # [B, T]
    kld = kl_penalty(old_log_prob, ref_log_prob, kind)  # [B, T]
    kld = torch.where(valid, kld, torch.zeros((), dtype=kld.dtype, device=kld.device))
    beta = float(kl_ctrl.value)
    token_level_rewards = token_level_scores - beta * kld.to(token_level_scores.dtype)  # [B, T]

    row_kl = masked_mean(kld, valid, dim=-1)  # [B]
    nonempty = valid.any(dim=-1)  # [B]
    current_kl = float(masked_mean(row_kl, nonempty).item())
    batch_size = token_level_scores.shape[0]
    kl_ctrl.update(current_kl=current_kl, n_steps=batch_size)
    metrics = {
        "actor/reward_kl_penalty": current_kl,
        "actor/reward_kl_penalty_coeff": beta,
    }
    return token_level_rewards, metrics
