"""Advantage estimators, behind a registry so the trainer picks one by name.

Every registered estimator has the same keyword signature::

    fn(token_level_rewards, response_mask, *, values=None, index=None,
       gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True, eps=1e-6)
        -> (advantages [B, T], returns [B, T])

so the trainer can call any of them uniformly, and each registry entry carries
``needs_critic`` so the trainer knows whether to build/run a value model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from hybridrl.algorithms.utils import masked_whiten

__all__ = [
    "AdvEstimator",
    "ADV_ESTIMATORS",
    "register_adv_estimator",
    "get_adv_estimator",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
]

AdvFn = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]


@dataclass(frozen=True)
class AdvEstimator:
    """A registry entry: the estimator function plus whether it needs a critic."""

    name: str
    fn: AdvFn
    needs_critic: bool

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fn(*args, **kwargs)


ADV_ESTIMATORS: dict[str, AdvEstimator] = {}


def register_adv_estimator(name: str, needs_critic: bool = False) -> Callable[[AdvFn], AdvFn]:
    """Decorator adding ``fn`` to ``ADV_ESTIMATORS`` under ``name``.

    Registering the same name twice is an error, so that a typo or an import
    order accident cannot silently replace an estimator.
    """

    def decorator(fn: AdvFn) -> AdvFn:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATORS[name] = AdvEstimator(name=name, fn=fn, needs_critic=needs_critic)
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvEstimator:
    """Look up an estimator entry (callable, with ``.needs_critic``) by name."""
    try:
        return ADV_ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; valid names: {sorted(ADV_ESTIMATORS)}"
        ) from None


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1 or any(len(s) != 2 for s in shapes.values()):
        raise ValueError(f"expected tensors of identical shape [B, T], got {shapes}")


@torch.no_grad()
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016) over response tokens.

    Computed backwards over T. A padded position passes the running
    ``nextvalue`` / ``lastgaelam`` through unchanged, so the last valid token
    bootstraps from 0 (episode end) and nothing from padding (reward, value,
    even NaN) reaches a valid token. ``returns = advantages + values`` is taken
    before whitening (it is the critic target); advantages are then whitened over
    the valid tokens. Both outputs are 0 at padding.
    """
    # token_level_rewards, values, response_mask: [B, T]
    _check_same_shape(
        token_level_rewards=token_level_rewards, values=values, response_mask=response_mask
    )
    valid = response_mask.to(token_level_rewards.device).bool()  # [B, T]
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    rewards = torch.where(valid, token_level_rewards.to(values.dtype), zero)  # [B, T]
    vals = torch.where(valid, values, zero)  # [B, T]

    B, T = vals.shape
    nextvalues = torch.zeros(B, dtype=vals.dtype, device=vals.device)  # [B]
    lastgaelam = torch.zeros(B, dtype=vals.dtype, device=vals.device)  # [B]
    advantages_reversed: list[torch.Tensor] = []
    for t in reversed(range(T)):
        v_t = valid[:, t]  # [B]
        delta = rewards[:, t] + gamma * nextvalues - vals[:, t]  # [B]
        gae_t = delta + gamma * lam * lastgaelam  # [B]
        # Padding: keep the running state, emit 0.
        nextvalues = torch.where(v_t, vals[:, t], nextvalues)
        lastgaelam = torch.where(v_t, gae_t, lastgaelam)
        advantages_reversed.append(torch.where(v_t, gae_t, zero))
    advantages = torch.stack(advantages_reversed[::-1], dim=1)  # [B, T]

    returns = torch.where(valid, advantages + vals, zero)  # [B, T]
    advantages = torch.where(valid, masked_whiten(advantages, valid), zero)  # [B, T]
    return advantages, returns


def _group_ids(index: Any, batch_size: int) -> torch.Tensor:
    """Map arbitrary hashable group ids (uid strings, ints) to dense ints [B]."""
    if isinstance(index, torch.Tensor):
        keys: Sequence[Any] = index.tolist()
    else:
        keys = np.asarray(index, dtype=object).reshape(-1).tolist()
    if len(keys) != batch_size:
        raise ValueError(f"index has {len(keys)} entries but the batch has {batch_size} rows")
    dense: dict[Any, int] = {}
    return torch.tensor([dense.setdefault(k, len(dense)) for k in keys], dtype=torch.long)


@torch.no_grad()
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage (Shao et al. 2024): no critic, the group is the baseline.

    score_i = sum of row i's rewards over valid tokens; rows sharing an ``index``
    value are one group (responses to the same prompt). advantage_i =
    (score_i - mean_group) / (std_group + epsilon), with the unbiased std; without
    ``norm_adv_by_std_in_grpo`` only the mean is removed (Dr. GRPO). A group of
    one row gets mean 0 and std 1 (no baseline to compare with). The advantage
    is broadcast to every valid token; returns = advantages.
    """
    # token_level_rewards, response_mask: [B, T]; index: [B] group ids
    _check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    if index is None:
        raise ValueError("grpo needs `index` (one group id per row)")
    valid = response_mask.to(token_level_rewards.device).bool()  # [B, T]
    dtype = token_level_rewards.dtype if token_level_rewards.is_floating_point() else torch.float32
    zero = torch.zeros((), dtype=dtype, device=token_level_rewards.device)
    scores = torch.where(valid, token_level_rewards.to(dtype), zero).sum(dim=-1)  # [B]

    B = scores.shape[0]
    gid = _group_ids(index, B).to(scores.device)  # [B]
    n_groups = int(gid.max().item()) + 1 if B > 0 else 0
    counts = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(
        0, gid, torch.ones_like(scores)
    )  # [G]
    sums = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(0, gid, scores)
    mean = sums / counts  # [G]
    sq = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(
        0, gid, (scores - mean[gid]) ** 2
    )  # [G]
    std = torch.sqrt(sq / (counts - 1).clamp(min=1.0))  # [G], unbiased
    single = counts == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)

    adv = scores - mean[gid]  # [B]
    if norm_adv_by_std_in_grpo:
        adv = adv / (std[gid] + epsilon)
    advantages = torch.where(valid, adv.unsqueeze(-1), zero)  # [B, T]
    return advantages, advantages.clone()


@register_adv_estimator("gae", needs_critic=True)
def _gae_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for GAE (``index``, ``norm_adv_by_std_in_grpo``, ``eps`` unused)."""
    if values is None:
        raise ValueError("gae needs `values` from a critic")
    return compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam)


@register_adv_estimator("grpo", needs_critic=False)
def _grpo_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    index: Any = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for GRPO (``values``, ``gamma``, ``lam`` unused)."""
    return compute_grpo_outcome_advantage(
        token_level_rewards,
        response_mask,
        index,
        epsilon=eps,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )
