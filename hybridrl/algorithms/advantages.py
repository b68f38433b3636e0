"""Advantage estimators, behind a registry so the trainer picks one by name.

Every registered estimator has the same keyword signature::

    fn(token_level_rewards, response_mask, *, values=None, index=None,
       gamma=1.0, lam=1.0, norm_adv_by_std_in_grpo=True, eps=1e-6,
       reward_baselines=None)
        -> (advantages [B, T], returns [B, T])

so the trainer can call any of them uniformly; an estimator ignores the
arguments it has no use for. Each registry entry carries flags telling the
trainer what else to prepare:

- ``needs_critic``: build/run a value model and pass ``values``.
- ``needs_groups``: the baseline comes from other responses to the same prompt,
  so ``rollout.n`` must be > 1 and ``index`` must be passed.
- ``needs_greedy_baseline``: also generate one greedy response per prompt and
  pass its score as ``reward_baselines`` (ReMax).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
]

AdvFn = Callable[..., "tuple[torch.Tensor, torch.Tensor]"]


@dataclass(frozen=True)
class AdvEstimator:
    """A registry entry: the estimator function plus what the trainer must provide for it."""

    name: str
    fn: AdvFn
    needs_critic: bool
    needs_groups: bool = False
    needs_greedy_baseline: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fn(*args, **kwargs)


ADV_ESTIMATORS: dict[str, AdvEstimator] = {}


def register_adv_estimator(
    name: str,
    needs_critic: bool = False,
    needs_groups: bool = False,
    needs_greedy_baseline: bool = False,
) -> Callable[[AdvFn], AdvFn]:
    """Decorator adding ``fn`` to ``ADV_ESTIMATORS`` under ``name``.

    Registering the same name twice is an error, so that a typo or an import
    order accident cannot silently replace an estimator.
    """

    def decorator(fn: AdvFn) -> AdvFn:
        if name in ADV_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADV_ESTIMATORS[name] = AdvEstimator(
            name=name,
            fn=fn,
            needs_critic=needs_critic,
            needs_groups=needs_groups,
            needs_greedy_baseline=needs_greedy_baseline,
        )
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvEstimator:
    """Look up an estimator entry (callable, with ``.needs_critic`` etc.) by name."""
    try:
        return ADV_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; valid names: {sorted(ADV_ESTIMATORS)}") from None


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
    _check_same_shape(token_level_rewards=token_level_rewards, values=values, response_mask=response_mask)
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
    counts = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(0, gid, torch.ones_like(scores))  # [G]
    sums = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(0, gid, scores)
    mean = sums / counts  # [G]
    sq = torch.zeros(n_groups, dtype=dtype, device=scores.device).index_add_(0, gid, (scores - mean[gid]) ** 2)  # [G]
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
    gamma: float = 1.0,
    lam: float = 1.0,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for GAE (``index``, ``norm_adv_by_std_in_grpo``, ``eps``,
    ``reward_baselines`` unused)."""
    if values is None:
        raise ValueError("gae needs `values` from a critic")
    return compute_gae_advantage_return(token_level_rewards, values, response_mask, gamma, lam)


@register_adv_estimator("grpo", needs_critic=False, needs_groups=True)
def _grpo_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    index: Any = None,
    norm_adv_by_std_in_grpo: bool = True,
    eps: float = 1e-6,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for GRPO (``values``, ``gamma``, ``lam``, ``reward_baselines`` unused)."""
    return compute_grpo_outcome_advantage(
        token_level_rewards,
        response_mask,
        index,
        epsilon=eps,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )


# --------------------------------------------------------------------------- #
# Critic-free estimators beyond GRPO
# --------------------------------------------------------------------------- #


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    return x.dtype if x.is_floating_point() else torch.float32


def _outcome_scores(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scores [B], valid [B, T], zero scalar): each row's reward summed over valid tokens."""
    _check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    valid = response_mask.to(token_level_rewards.device).bool()  # [B, T]
    dtype = _float_dtype(token_level_rewards)
    zero = torch.zeros((), dtype=dtype, device=token_level_rewards.device)
    scores = torch.where(valid, token_level_rewards.to(dtype), zero).sum(dim=-1)  # [B]
    return scores, valid, zero


def _group_sum_count(scores: torch.Tensor, index: Any, who: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (sum of its group's scores, size of its group), both [B]."""
    if index is None:
        raise ValueError(f"{who} needs `index` (one group id per row)")
    B = scores.shape[0]
    gid = _group_ids(index, B).to(scores.device)  # [B]
    n_groups = int(gid.max().item()) + 1 if B > 0 else 0
    sums = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(0, gid, scores)
    counts = torch.zeros(n_groups, dtype=scores.dtype, device=scores.device).index_add_(
        0, gid, torch.ones_like(scores)
    )  # [G]
    return sums[gid], counts[gid]  # [B], [B]


@torch.no_grad()
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024): leave-one-out group baseline.

    score_i = sum of row i's rewards over valid tokens; in a group of n > 1 rows
    (same ``index``), advantage_i = score_i - mean_{j != i} score_j
    (= n / (n - 1) * (score_i - mean_group)). The baseline excludes the row
    itself, so it is independent of the row's own action and the estimate is
    unbiased. A group of one row gets advantage 0: with no other sample there is
    no baseline, hence no learning signal (verl instead keeps the raw score).
    Broadcast to every valid token; returns = advantages.
    """
    # token_level_rewards, response_mask: [B, T]; index: [B] group ids
    scores, valid, zero = _outcome_scores(token_level_rewards, response_mask)  # [B]
    group_sum, n = _group_sum_count(scores, index, "rloo")  # [B], [B]
    loo_mean = (group_sum - scores) / (n - 1).clamp(min=1.0)  # [B]
    adv = torch.where(n > 1, scores - loo_mean, torch.zeros_like(scores))  # [B]
    advantages = torch.where(valid, adv.unsqueeze(-1), zero)  # [B, T]
    return advantages, advantages.clone()


@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025): discounted token returns, whitened over the batch.

    G_t = r_t + gamma * G_{t+1} over valid tokens, computed backwards; a padded
    position neither contributes its reward nor resets the running return (it is
    passed through). The batch-wide whitening over valid tokens replaces a critic
    or group baseline. Returns the raw G (0 at padding); advantages are the
    whitened G (0 at padding).
    """
    # token_level_rewards, response_mask: [B, T]
    _check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    valid = response_mask.to(token_level_rewards.device).bool()  # [B, T]
    dtype = _float_dtype(token_level_rewards)
    zero = torch.zeros((), dtype=dtype, device=token_level_rewards.device)
    rewards = torch.where(valid, token_level_rewards.to(dtype), zero)  # [B, T]

    B, T = rewards.shape
    running = torch.zeros(B, dtype=dtype, device=rewards.device)  # [B]
    returns_reversed: list[torch.Tensor] = []
    for t in reversed(range(T)):
        v_t = valid[:, t]  # [B]
        running = torch.where(v_t, rewards[:, t] + gamma * running, running)
        returns_reversed.append(torch.where(v_t, running, zero))
    returns = torch.stack(returns_reversed[::-1], dim=1)  # [B, T]

    advantages = torch.where(valid, masked_whiten(returns, valid), zero)  # [B, T]
    return advantages, returns


@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (Hu 2025): group-mean baseline, then batch whitening.

    advantage_i = score_i - mean of its group's scores, broadcast to valid
    tokens, then whitened over all valid tokens of the batch (so the scale comes
    from the batch, not from each small group's std as in GRPO). A group of one
    row is its own mean and gets 0 before whitening (verl subtracts 0 instead).
    Returns = advantages.
    """
    # token_level_rewards, response_mask: [B, T]; index: [B] group ids
    scores, valid, zero = _outcome_scores(token_level_rewards, response_mask)  # [B]
    group_sum, n = _group_sum_count(scores, index, "reinforce_plus_plus_baseline")  # [B], [B]
    centred = torch.where(n > 1, scores - group_sum / n, torch.zeros_like(scores))  # [B]
    adv = torch.where(valid, centred.unsqueeze(-1), zero)  # [B, T]
    advantages = torch.where(valid, masked_whiten(adv, valid), zero)  # [B, T]
    return advantages, advantages.clone()


@torch.no_grad()
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023): REINFORCE with the greedy response's score as baseline.

    returns_t = sum of rewards from t to the end of the row over valid tokens
    (gamma = 1); advantages_t = returns_t - reward_baselines (one baseline per
    row: the score of the greedy decode for the same prompt). No whitening.
    Both outputs are 0 at padding.
    """
    # token_level_rewards, response_mask: [B, T]; reward_baselines: [B]
    _check_same_shape(token_level_rewards=token_level_rewards, response_mask=response_mask)
    B = token_level_rewards.shape[0]
    if tuple(reward_baselines.shape) != (B,):
        raise ValueError(f"reward_baselines must have shape [B]=({B},), got {tuple(reward_baselines.shape)}")
    valid = response_mask.to(token_level_rewards.device).bool()  # [B, T]
    dtype = _float_dtype(token_level_rewards)
    zero = torch.zeros((), dtype=dtype, device=token_level_rewards.device)
    rewards = torch.where(valid, token_level_rewards.to(dtype), zero)  # [B, T]
    returns = rewards.flip(-1).cumsum(dim=-1).flip(-1)  # [B, T]
    returns = torch.where(valid, returns, zero)
    baselines = reward_baselines.to(device=rewards.device, dtype=dtype).unsqueeze(-1)  # [B, 1]
    advantages = torch.where(valid, returns - baselines, zero)  # [B, T]
    return advantages, returns


@register_adv_estimator("rloo", needs_critic=False, needs_groups=True)
def _rloo_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    index: Any = None,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for RLOO (only ``index`` is used)."""
    return compute_rloo_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_estimator("reinforce_plus_plus", needs_critic=False)
def _reinforce_plus_plus_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for REINFORCE++ (only ``gamma`` is used)."""
    return compute_reinforce_plus_plus_outcome_advantage(token_level_rewards, response_mask, gamma)


@register_adv_estimator("reinforce_plus_plus_baseline", needs_critic=False, needs_groups=True)
def _reinforce_plus_plus_baseline_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    index: Any = None,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for REINFORCE++-baseline (only ``index`` is used)."""
    return compute_reinforce_plus_plus_baseline_outcome_advantage(token_level_rewards, response_mask, index)


@register_adv_estimator("remax", needs_critic=False, needs_greedy_baseline=True)
def _remax_estimator(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    reward_baselines: torch.Tensor | None = None,
    **_unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Registry adapter for ReMax (only ``reward_baselines`` is used; it is required)."""
    if reward_baselines is None:
        raise ValueError("remax needs `reward_baselines` (the greedy response's score per row)")
    return compute_remax_outcome_advantage(token_level_rewards, reward_baselines, response_mask)
