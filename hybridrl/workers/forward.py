"""Forward passes shared by the roles: response log-probs of a policy, per-position values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from hybridrl.algorithms.losses import loss_units
from hybridrl.algorithms.token_logprobs import TokenScores, TokenScoring, token_log_probs
from hybridrl.config.schema import TrainedRoleConfig
from hybridrl.data.partition import balanced_partition, micro_batch_count
from hybridrl.engine.base import LossFn, TrainEngine
from hybridrl.engine.packing import ModelOutput, PackedOutput
from hybridrl.protocol import Batch


def response_log_probs(
    logits: ModelOutput, batch: Batch, scoring: TokenScoring
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of each response token (B, R), from the policy's logits at sampling
    temperature, in bounded memory (``token_log_probs``: no fp32 copy of the logits); or as the engine
    already scored them (fused kernels, given the same ``scoring``)."""
    if isinstance(logits, TokenScores):
        return logits.log_probs, logits.entropy
    options = dict(with_entropy=scoring.with_entropy, entropy_grad=scoring.entropy_grad, checkpoint=scoring.checkpoint)
    responses = batch.tensors["responses"]  # (B, R)
    resp_len = responses.shape[1]
    if isinstance(logits, PackedOutput):  # only the real response tokens, back on the (B, R) grid
        rows = logits.rows
        assert rows.response_flat is not None and rows.response_index is not None, "packed without responses"
        log_probs, entropy = token_log_probs(
            logits.output if logits.at_responses else logits.output[:, rows.response_index],
            responses.reshape(-1)[rows.response_flat].unsqueeze(0),
            scoring.temperature,
            **options,
        )
        return rows.unpack_responses(log_probs), None if entropy is None else rows.unpack_responses(entropy)
    if logits.shape[1] != resp_len:  # every position's logits: those at P-1 .. P+R-2 predict the responses
        logits = logits[:, -resp_len - 1 : -1, :]  # a view (B, R, V): read chunk by chunk
    return token_log_probs(logits, responses, scoring.temperature, **options)


def response_values(values: ModelOutput, batch: Batch) -> torch.Tensor:
    """Value of the state before each response token (the position that predicts it), from per-position values."""
    if isinstance(values, PackedOutput):
        rows = values.rows
        assert rows.response_index is not None, "packed without responses"
        return rows.unpack_responses(values.output[:, rows.response_index]).float()
    assert isinstance(values, torch.Tensor), "a value model's output"
    resp_len = batch.tensors["responses"].shape[1]
    if values.shape[1] == resp_len:  # already at the response positions (shared prompts)
        return values.float()
    return values[:, -resp_len - 1 : -1].float()  # (B, R)


#: The key under which a micro-batch's metrics carry their weight (its share of the mini-batch's units).
WEIGHT = "_weight"


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Means of the rows' metrics, weighted by their ``WEIGHT`` where they have one: a mini-batch's loss
    metrics are then those of the whole mini-batch, however it was cut into micro-batches."""
    weights = [r.get(WEIGHT, 1.0) for r in rows]
    total = sum(weights) or 1.0
    keys = [k for k in (rows[0].keys() if rows else []) if k != WEIGHT]
    return {k: sum(w * r[k] for w, r in zip(weights, rows, strict=True)) / total for k in keys}


def mean_over_replicas(engine: TrainEngine, rows: list[dict[str, float]]) -> dict[str, float]:
    """``mean_metrics`` of one mini-batch's micro-batches over every replica, each weighted by its share of
    the mini-batch's units (``WEIGHT``): the metrics of the whole mini-batch's loss on every rank, however
    its rows were split over replicas (a plain mean of the replicas' means is not, with ragged responses)."""
    row = mean_metrics(rows)
    if engine.dp_size == 1 or not row:
        return row
    keys = sorted(row)
    weight = sum(r.get(WEIGHT, 1.0) for r in rows)
    sums = engine.sum_over_replicas(torch.tensor([*(weight * row[k] for k in keys), weight], dtype=torch.float64))
    total = float(sums[-1]) or 1.0
    return {k: float(sums[i]) / total for i, k in enumerate(keys)}


@dataclass(frozen=True)
class MicroBatching:
    """How a role splits its rows for one pass: ``rows`` per micro-batch, or, with ``max_tokens`` (verl's
    ``use_dynamic_bsz``), balanced micro-batches of at most that many real tokens, as many on every rank
    of the group. ``key`` names the budget's config key in errors."""

    rows: int
    max_tokens: int | None = None
    key: str = ""

    @classmethod
    def for_update(cls, cfg: TrainedRoleConfig, section: str) -> MicroBatching:
        """The update's micro-batches from the role's config ``section`` (its dotted path, for errors)."""
        if cfg.use_dynamic_bsz:
            return cls(
                cfg.ppo_micro_batch_size_per_gpu, cfg.ppo_max_token_len_per_gpu, f"{section}.ppo_max_token_len_per_gpu"
            )
        return cls(cfg.ppo_micro_batch_size_per_gpu)

    def split(self, batch: Batch, engine: TrainEngine) -> tuple[list[Batch], np.ndarray | None]:
        """The micro-batches, and the order of their rows in ``batch`` when they are not consecutive."""
        if self.max_tokens is None:
            return [batch[i : i + self.rows] for i in range(0, len(batch), self.rows)], None
        lengths = batch.tensors["attention_mask"].sum(-1).tolist()
        longest = max(lengths, default=0)
        budget = self.max_tokens * engine.sequence_parallel_size  # verl's: per rank of a Ulysses group
        if longest > budget:
            split = f" x ulysses_sequence_parallel_size {engine.sequence_parallel_size}"
            raise ValueError(
                f"A sequence of {longest} tokens is longer than {self.key}={self.max_tokens}"
                f"{split if engine.sequence_parallel_size > 1 else ''}: raise it to at least "
                f"data.max_prompt_length + data.max_response_length."
            )
        count = engine.max_over_group(micro_batch_count(lengths, budget))
        if count > len(batch):
            raise RuntimeError(
                f"{count} micro-batches agreed over the group, but this rank has {len(batch)} rows: the "
                f"driver gives every rank as many rows."
            )
        bins = balanced_partition(lengths, count)
        return [batch[b] for b in bins], np.concatenate(bins) if bins else None


def forward_rows(
    engine: TrainEngine,
    batch: Batch,
    how: MicroBatching,
    head: Callable[[ModelOutput, Batch], tuple[torch.Tensor, ...]],
    scoring: TokenScoring | None = None,
) -> tuple[torch.Tensor, ...] | None:
    """``head``'s per-row tensors over ``batch``, without gradients, in ``batch``'s row order (on the host);
    None where this rank computes no result (an early pipeline stage). ``scoring``: how ``head`` scores
    response tokens, for engines that score inside the forward (fused kernels)."""
    micro, order = how.split(batch, engine)
    out = engine.forward_micro_batches(micro, head, scoring)
    if not out:
        return None
    columns = tuple(torch.cat([o[i].cpu() for o in out]) for i in range(len(out[0])))
    if order is None:
        return columns
    index = torch.from_numpy(order)
    return tuple(torch.empty_like(c).index_copy_(0, index, c) for c in columns)


def weighted_loss(
    engine: TrainEngine,
    mini_batch: Batch,
    loss_agg_mode: str,
    loss_fn: LossFn,
) -> LossFn:
    """``loss_fn`` scaled by its micro-batch's share of the mini-batch's units over every replica (valid
    tokens for token-mean, non-empty rows for the seq-mean modes), times the replica count (the replicas'
    gradients are averaged): the summed gradients are then those of the whole mini-batch's loss,
    however ragged its micro-batches and replicas are. (An equal 1/n per micro-batch gave a relative
    gradient error of 0.48 on ragged micro-batches.)"""
    units = loss_units(mini_batch.tensors["response_mask"], loss_agg_mode)
    total = float(engine.sum_over_replicas(units.reshape(1)).item())
    scale = engine.dp_size / max(total, 1.0)

    def weighted(output: ModelOutput, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        loss, row = loss_fn(output, mb)
        share = float(loss_units(mb.tensors["response_mask"], loss_agg_mode)) * scale
        return loss * share, {**row, WEIGHT: share}

    return weighted


def ppo_update(
    engine: TrainEngine,
    batch: Batch,
    cfg: TrainedRoleConfig,
    mini_size: int,
    seed: int,
    loss_fn: LossFn,
    prefix: str,
    scoring: TokenScoring | None = None,
    *,
    section: str,
) -> dict[str, float]:
    """PPO epochs over ``batch``: mini-batches of ``mini_size`` rows (one optimizer step each), split into
    micro-batches (``MicroBatching.for_update``) whose gradients accumulate. ``loss_fn`` maps
    the model's output on one micro-batch to its loss and metrics; the returned metrics are their means
    (empty of loss metrics on ranks that compute no loss, e.g. early pipeline stages)."""
    generator = torch.Generator().manual_seed(seed)
    rows: list[dict[str, float]] = []
    how = MicroBatching.for_update(cfg, section)
    engine.model.train()
    for _ in range(cfg.ppo_epochs):
        data = batch.shuffle(generator) if cfg.shuffle else batch
        for mini_batch in data.minibatches(mini_size):
            stats = engine.forward_backward(
                how.split(mini_batch, engine)[0],
                weighted_loss(engine, mini_batch, cfg.loss_agg_mode, loss_fn),
                average=False,
                scoring=scoring,
            )
            row = mean_over_replicas(engine, stats)
            row[f"{prefix}/grad_norm"] = engine.step(cfg.grad_clip)
            rows.append(row)
    out = mean_metrics(rows)
    out[f"{prefix}/lr"] = engine.lr  # the rate this step's updates used
    engine.advance_lr()
    out[f"{prefix}/skipped_steps"] = float(engine.skipped_steps)
    if engine.loss_scaler is not None:
        out[f"{prefix}/loss_scale"] = engine.loss_scaler.scale
    return out
