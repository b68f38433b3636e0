"""Per-token log-probs and entropy from a (batch, length, vocab) logits view without an fp32 copy of it.

At a 152k vocabulary one 3k-token response's logits are 1.9 GB in fp32, and the log-prob pass over a
micro-batch of 64 such rows would need ~120 GB for the cast alone. Here the logits are read in chunks
of at most ``chunk_tokens`` positions: each chunk is upcast, scored and dropped, so a forward-only pass
holds one chunk's fp32 temporaries. In training, autograd keeps each chunk's temporaries for the
backward pass unless ``checkpoint`` recomputes them there (verl's ``entropy_checkpointing``). Entropy
carries gradients only when the loss uses it (``entropy_coeff != 0``); otherwise it is a metric,
computed without a graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint as recompute

#: fp32 elements per chunk (64 MB): the positions per chunk are this over the vocabulary size.
CHUNK_ELEMENTS = 1 << 24


def _chunk(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float, with_entropy: bool, entropy_grad: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """``logits`` [T, V] (any float dtype), ``labels`` [T] -> log-probs [T] and entropy [T] (or empty)."""
    z = logits.float() / temperature
    lse = torch.logsumexp(z, dim=-1)
    log_probs = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse
    if not with_entropy:
        return log_probs, log_probs.new_empty(0)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        if not entropy_grad:
            z, lse = z.detach(), lse.detach()
        # H = logsumexp(z) - sum softmax(z) * z; -inf logits (a masked vocabulary) have p = 0: zero them so
        # that 0 * -inf is not NaN.
        finite = torch.where(torch.isfinite(z), z, torch.zeros_like(z))
        return log_probs, lse - (torch.softmax(z, dim=-1) * finite).sum(dim=-1)


@dataclass(frozen=True)
class TokenScoring:
    """How a pass scores the response tokens. Handed to the engine, so that with fused kernels the scores
    come out of the model's own forward (``hidden_token_log_probs`` in place of its output head)."""

    temperature: float
    with_entropy: bool
    entropy_grad: bool = True
    checkpoint: bool = False


@dataclass(frozen=True)
class TokenScores:
    """Log-probs (and entropy) of the response tokens on the (rows, response length) grid, float32."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None


def _over_chunks(
    inputs: torch.Tensor,
    labels: torch.Tensor,
    step: int,
    score: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    with_entropy: bool,
    checkpoint: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``score`` over [B, T, ...] ``inputs`` in chunks of ``step`` positions -> [B, T] log-probs, entropy."""
    rows, length = labels.shape
    train = torch.is_grad_enabled() and inputs.requires_grad
    log_probs, entropies = [], []
    # unbind and split, not indexing: their backward assembles the inputs' gradient once (a stack, a cat),
    # where each indexed chunk's backward would fill a zero tensor of the whole inputs' size.
    for row_inputs, row_labels in zip(inputs.unbind(0), labels.unbind(0), strict=True):
        for chunk, chunk_labels in zip(row_inputs.split(step), row_labels.split(step), strict=True):
            if train and checkpoint:
                lp, ent = recompute(score, chunk, chunk_labels, use_reentrant=False)
            else:
                lp, ent = score(chunk, chunk_labels)
            log_probs.append(lp)
            entropies.append(ent)
    if not log_probs:
        empty = inputs.new_zeros((rows, length), dtype=torch.float32)
        return empty, (empty.clone() if with_entropy else None)
    out = torch.cat(log_probs).view(rows, length)
    return out, (torch.cat(entropies).view(rows, length) if with_entropy else None)


def hidden_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    scoring: TokenScoring,
    *,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``token_log_probs`` of the logits ``hidden @ weight.T + bias`` ([B, T, H] hidden states, the output
    head's [V, H] weight) without ever holding them: each chunk's logits are computed, scored and dropped,
    and with ``scoring.checkpoint`` recomputed in backward (verl's fused kernels do the same on GPU)."""
    if hidden.dim() != 3 or labels.shape != hidden.shape[:2]:
        raise ValueError(
            f"expected hidden [B, T, H] and labels [B, T], got {tuple(hidden.shape)} and {tuple(labels.shape)}"
        )
    step = max(1, chunk_tokens or CHUNK_ELEMENTS // max(weight.shape[0], 1))

    def score(h: torch.Tensor, lab: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _chunk(F.linear(h, weight, bias), lab, scoring.temperature, scoring.with_entropy, scoring.entropy_grad)

    labels = labels.to(device=hidden.device, dtype=torch.long)
    return _over_chunks(hidden, labels, step, score, scoring.with_entropy, scoring.checkpoint)


def token_log_probs(
    logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = True,
    checkpoint: bool = False,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``labels`` [B, T] under ``logits / temperature`` [B, T, V] (a view is fine), and the
    entropy [B, T] with ``with_entropy``; both float32.

    ``entropy_grad=False``: the entropy is computed without gradients (a metric). ``checkpoint``: in
    training, each chunk is recomputed in backward instead of keeping its fp32 temporaries."""
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    vocab = logits.shape[2]
    step = max(1, chunk_tokens or CHUNK_ELEMENTS // max(vocab, 1))
    labels = labels.to(device=logits.device, dtype=torch.long)

    def score(chunk: torch.Tensor, lab: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _chunk(chunk, lab, temperature, with_entropy, entropy_grad)

    return _over_chunks(logits, labels, step, score, with_entropy, checkpoint)


# --------------------------------------------------------------------------- #
# Per-token quantities from logits
# --------------------------------------------------------------------------- #


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # Half-precision log-softmax over a 100k+ vocab loses too much; upcast.
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _entropy_rows(logits: torch.Tensor) -> torch.Tensor:
    # logits: [T, V] -> [T]
    probs = torch.softmax(logits, dim=-1)
    # -inf logits (masked vocab) have p = 0; zero them so 0 * -inf is not NaN.
    finite_logits = torch.where(torch.isfinite(logits), logits, torch.zeros_like(logits))
    return torch.logsumexp(logits, dim=-1) - (probs * finite_logits).sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy of the categorical over the vocab: ``[B, T, V] -> [B, T]``.

    H = logsumexp(z) - sum softmax(z) * z, which never takes log of a
    probability, so it is stable for very peaked distributions. Computed one
    batch row at a time (in float32 for half inputs) to bound the temporaries.
    """
    if logits.dim() != 3:
        raise ValueError(f"expected logits [B, T, V], got shape {tuple(logits.shape)}")
    dtype = _compute_dtype(logits.dtype)
    rows = [_entropy_rows(row.to(dtype)) for row in logits]  # B x [T]
    if not rows:
        return logits.new_zeros(logits.shape[:2], dtype=dtype)
    return torch.stack(rows, dim=0)  # [B, T]


def log_probs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Log-probability of ``labels`` under ``logits``: ``[B, T, V], [B, T] -> [B, T]``.

    Computed as z[label] - logsumexp(z), one batch row at a time (float32 for
    half inputs), so the full ``[B, T, V]`` log-softmax is never materialised.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"expected logits [B, T, V] and labels [B, T], got {tuple(logits.shape)} and {tuple(labels.shape)}"
        )
    dtype = _compute_dtype(logits.dtype)
    labels = labels.to(device=logits.device, dtype=torch.long)
    out = []
    for row, lab in zip(logits, labels):  # row: [T, V], lab: [T]
        row = row.to(dtype)
        picked = row.gather(-1, lab.unsqueeze(-1)).squeeze(-1)  # [T]
        out.append(picked - torch.logsumexp(row, dim=-1))
    if not out:
        return logits.new_zeros(labels.shape, dtype=dtype)
    return torch.stack(out, dim=0)  # [B, T]
