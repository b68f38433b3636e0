"""Masked reductions over response tokens.

Every PPO statistic is taken over real response tokens only, so these helpers
take a ``mask`` (1 = real token, 0 = padding) alongside the data. Masked
positions are *selected out* (``torch.where``) rather than multiplied by zero,
so NaN/inf sitting in padding can never leak into a result.
"""

from __future__ import annotations

import torch

__all__ = ["LOG_RATIO_CLAMP", "masked_sum", "masked_mean", "masked_var", "masked_whiten"]

# Log-ratios beyond this are clamped before exp: exp(88) overflows float32 and a single runaway token once
# turned the whole loss into NaN.
LOG_RATIO_CLAMP = 20.0


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x * mask`` with masked-out positions forced to exactly 0 (even if NaN/inf)."""
    mask = mask.to(x.device)
    if mask.dtype == torch.bool:
        return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return torch.where(mask != 0, x * mask, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of ``x`` over positions where ``mask`` is non-zero (weighted by mask)."""
    xm = _masked(x, mask)
    return xm.sum() if dim is None else xm.sum(dim=dim)


def _mask_count(x: torch.Tensor, mask: torch.Tensor, dim: int | None) -> torch.Tensor:
    """Number (total weight) of valid positions, in x's dtype, broadcast like x."""
    m = torch.broadcast_to(mask.to(device=x.device, dtype=x.dtype), x.shape)
    return m.sum() if dim is None else m.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over valid positions; 0 where there is no valid position.

    The empty case returns 0 instead of NaN so that an all-padding row (or an
    empty micro-batch) does not poison a metric or a loss.
    """
    count = _mask_count(x, mask, dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1e-8)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``x`` over all valid positions (scalar).

    With ``unbiased`` the Bessel factor n/(n-1) is applied when n > 1; with a
    single valid position the (biased) variance 0 is returned instead of a
    division by zero.
    """
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = _mask_count(x, mask, None)
        var = var * n / (n - 1).clamp(min=1.0)
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True, eps: float = 1e-8) -> torch.Tensor:
    """Normalise ``x`` to zero mean / unit variance using valid positions only.

    Statistics ignore padding; the output at padded positions is not meaningful
    and callers should re-apply the mask. ``shift_mean=False`` only rescales
    (keeps the original mean).
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    whitened = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened
