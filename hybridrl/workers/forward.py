"""Forward passes shared by the roles: response log-probs of a policy, per-position values."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hybridrl.algorithms.losses import loss_units
from hybridrl.algorithms.token_logprobs import token_log_probs
from hybridrl.config.schema import TrainedRoleConfig
from hybridrl.parallel.engine import TrainEngine
from hybridrl.protocol import Batch


def response_log_probs(
    logits: torch.Tensor,
    batch: Batch,
    temperature: float,
    with_entropy: bool,
    *,
    entropy_grad: bool = True,
    checkpoint: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of each response token, from the policy's logits at sampling temperature,
    in bounded memory (``token_log_probs``: no fp32 copy of the logits)."""
    responses = batch.tensors["responses"]  # (B, R)
    resp_len = responses.shape[1]
    # The logit at position t predicts token t+1: responses are predicted by P-1 .. P+R-2.
    return token_log_probs(
        logits[:, -resp_len - 1 : -1, :],  # a view (B, R, V): read chunk by chunk
        responses,
        temperature,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
        checkpoint=checkpoint,
    )


def response_values(values: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Value of the state before each response token (the position that predicts it), from per-position values."""
    resp_len = batch.tensors["responses"].shape[1]
    return values[:, -resp_len - 1 : -1].float()  # (B, R)


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = rows[0].keys() if rows else []
    return {k: sum(r[k] for r in rows) / len(rows) for k in keys}


def micro_batches(batch: Batch, size: int) -> list[Batch]:
    """Consecutive chunks of at most ``size`` rows (the last may be smaller): forward-only passes."""
    return [batch[i : i + size] for i in range(0, len(batch), size)]


def weighted_loss(
    engine: TrainEngine,
    mini_batch: Batch,
    loss_agg_mode: str,
    loss_fn: Callable[[torch.Tensor, Batch], tuple[torch.Tensor, dict[str, float]]],
) -> Callable[[torch.Tensor, Batch], tuple[torch.Tensor, dict[str, float]]]:
    """``loss_fn`` scaled by its micro-batch's share of the mini-batch's units over every replica (valid
    tokens for token-mean, non-empty rows for the seq-mean modes), times the replica count (the replicas'
    gradients are averaged): the summed gradients are then those of the whole mini-batch's loss,
    however ragged its micro-batches and replicas are. (An equal 1/n per micro-batch gave a relative
    gradient error of 0.48 on ragged micro-batches.)"""
    units = loss_units(mini_batch.tensors["response_mask"], loss_agg_mode)
    total = float(engine.sum_over_replicas(units.reshape(1)).item())
    scale = engine.dp_size / max(total, 1.0)

    def weighted(output: torch.Tensor, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        loss, row = loss_fn(output, mb)
        return loss * (float(loss_units(mb.tensors["response_mask"], loss_agg_mode)) * scale), row

    return weighted


def ppo_update(
    engine: TrainEngine,
    batch: Batch,
    cfg: TrainedRoleConfig,
    mini_size: int,
    seed: int,
    loss_fn: Callable[[torch.Tensor, Batch], tuple[torch.Tensor, dict[str, float]]],
    prefix: str,
) -> dict[str, float]:
    """PPO epochs over ``batch``: mini-batches of ``mini_size`` rows (one optimizer step each), split into
    micro-batches of ``cfg.ppo_micro_batch_size_per_gpu`` whose gradients accumulate. ``loss_fn`` maps
    the model's output on one micro-batch to its loss and metrics; the returned metrics are their means
    (empty of loss metrics on ranks that compute no loss, e.g. early pipeline stages)."""
    generator = torch.Generator().manual_seed(seed)
    rows: list[dict[str, float]] = []
    engine.model.train()
    for _ in range(cfg.ppo_epochs):
        data = batch.shuffle(generator) if cfg.shuffle else batch
        for mini_batch in data.minibatches(mini_size):
            stats = engine.forward_backward(
                mini_batch.minibatches(cfg.ppo_micro_batch_size_per_gpu),
                weighted_loss(engine, mini_batch, cfg.loss_agg_mode, loss_fn),
                average=False,
            )
            row = mean_metrics(stats)
            row[f"{prefix}/grad_norm"] = engine.step(cfg.grad_clip)
            rows.append(row)
    out = mean_metrics(rows)
    out[f"{prefix}/lr"] = engine.lr
    out[f"{prefix}/skipped_steps"] = float(engine.skipped_steps)
    if engine.loss_scaler is not None:
        out[f"{prefix}/loss_scale"] = engine.loss_scaler.scale
    return out
