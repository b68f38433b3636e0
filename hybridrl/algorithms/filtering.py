"""Group filtering for DAPO's dynamic sampling (Yu et al. 2025).

With group-relative advantages (GRPO, RLOO, ...), a prompt whose sampled
responses all got the same score has zero advantage everywhere: it costs a
forward/backward pass and only dilutes the batch. DAPO drops such groups and
keeps sampling until the batch is full of groups with signal. These are the
pure selection functions; the sampling loop belongs to the trainer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["groups_with_signal"]


def _scores_and_groups(scores: Any, index: Any) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """(scores float64 [B], dense group id per row [B], original id of each dense id [G])."""
    if isinstance(scores, torch.Tensor):
        s = scores.detach().to("cpu", torch.float64).numpy()
    else:
        s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"expected one score per row, shape [B], got {s.shape}")
    keys = np.asarray(index, dtype=object).reshape(-1).tolist()
    if len(keys) != s.shape[0]:
        raise ValueError(f"index has {len(keys)} entries but there are {s.shape[0]} scores")
    dense: dict[Any, int] = {}
    gid = np.array([dense.setdefault(k, len(dense)) for k in keys], dtype=np.int64)
    return s, gid, list(dense)


def _group_has_signal(s: np.ndarray, gid: np.ndarray, n_groups: int) -> np.ndarray:
    """[G] bool: the group's scores are not all equal (max > min; NaN never counts)."""
    gmax = np.full(n_groups, -np.inf)
    gmin = np.full(n_groups, np.inf)
    with np.errstate(invalid="ignore"):
        np.maximum.at(gmax, gid, s)  # NaN propagates, and NaN > x is False
        np.minimum.at(gmin, gid, s)
    return gmax > gmin


def groups_with_signal(scores: torch.Tensor, index: np.ndarray) -> np.ndarray:
    """Row mask [B] (numpy bool): True where the row's group has a learning signal.

    A group (rows sharing an ``index`` id, i.e. responses to one prompt) is kept
    when its scores are not all equal (std > 0). All-correct or all-wrong groups
    are dropped, as is a group of one row (nothing to compare with) and any group
    containing a NaN score. Exact comparison (max > min), so rounding in a std
    cannot keep a group of identical scores. Groups need not be adjacent; ids may
    be strings or ints.
    """
    # scores: [B] outcome score per row; index: [B] group ids
    s, gid, ids = _scores_and_groups(scores, index)
    return _group_has_signal(s, gid, len(ids))[gid]  # [B]
