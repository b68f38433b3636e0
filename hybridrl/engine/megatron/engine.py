"""The Megatron-style training engine: tensor/sequence parallel (DTensor), pipeline stages
(``torch.distributed.pipelining``, 1F1B or GPipe) and data parallel on one (pp, dp, tp) mesh.

Data parallel here is Megatron's default: replicas hold every parameter of their (tp, pp) slice and
average gradients with one bucketed all-reduce before the optimizer step. (Sharding across replicas is
what the fsdp strategy is for.)
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import Replicate

from hybridrl.algorithms.token_logprobs import TokenScoring
from hybridrl.config.choices import Precision
from hybridrl.config.schema import OptimConfig
from hybridrl.engine.base import LossFn, TrainEngine
from hybridrl.engine.megatron.layout import MegatronLayout
from hybridrl.engine.megatron.tensor_parallel import apply_tensor_parallel, megatron_mesh
from hybridrl.engine.packing import ModelOutput, PackedOutput, PackedRows, pack_batch, pad_packed
from hybridrl.engine.precision import DynamicLossScaler
from hybridrl.models.decoder_stage import DecoderStage, decoder_parts, keep_stage, stage_layer_ranges
from hybridrl.models.weights import WeightSource, load_weights, materialize, tied_aliases
from hybridrl.protocol import Batch

logger = logging.getLogger(__name__)

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def _is_dtensor(tensor: Any) -> bool:
    return hasattr(tensor, "placements")


def _local(tensor: Any) -> torch.Tensor:
    return tensor.to_local() if _is_dtensor(tensor) else tensor


def _stage_of(name: str, ranges: list[range]) -> int:
    """The pipeline stage that owns parameter ``name``: its layer's stage; the embedding on the first
    stage; the final norm and head on the last."""
    match = _LAYER.search(name)
    if match:
        layer = int(match.group(1))
        return next(s for s, r in enumerate(ranges) if layer in r)
    return 0 if "embed_tokens" in name else len(ranges) - 1


#: Packed micro-batches of one pipeline pass are padded to a multiple of this many tokens, so that passes
#: share a few shapes (a pipeline stage and schedule is built, with a throw-away pass, per input shape).
PACKED_LENGTH_STEP = 128


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


class _PipelineCall:
    """The last stage's per-micro-batch function for one pipeline pass: ``fn(output, micro_batch)``. The
    schedule's target is the row indices of the micro-batch (``inputs`` maps them and the stage's output
    to what ``fn`` takes), so the loss can use any column of the batch."""

    def __init__(
        self,
        inputs: Callable[[torch.Tensor, torch.Tensor], tuple[ModelOutput, Batch]],
        fn: Callable,
        train: bool,
        n: int,
        loss_scaler: DynamicLossScaler | None,
        average: bool = True,
    ) -> None:
        self.inputs, self.fn, self.train, self.n, self.loss_scaler = inputs, fn, train, n, loss_scaler
        self.average = average
        self.results: list[Any] = []

    def __call__(self, output: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        value = self.fn(*self.inputs(output, rows))
        if not self.train:
            self.results.append(value)
            return output.new_zeros(())
        loss, row = value
        self.results.append(row)
        if self.average:
            loss = loss / self.n
        return self.loss_scaler.scale_loss(loss) if self.loss_scaler is not None else loss


class MegatronEngine(TrainEngine):
    def __init__(
        self,
        model: nn.Module,
        layout: MegatronLayout,
        device: torch.device,
        *,
        sequence_parallel: bool,
        schedule: str = "1F1B",
        num_microbatches: int | None = None,
        precision: Precision = Precision.fp32,
        optim_cfg: OptimConfig | None = None,
        loss_scaler: DynamicLossScaler | None = None,
        weights: WeightSource | None = None,
        remove_padding: bool = False,
    ) -> None:
        """With ``weights``, ``model`` is empty (meta parameters): this rank keeps its stage, shards it over
        the tensor-parallel ranks, then allocates and reads only its slices."""
        self.layout = layout
        self.schedule = schedule
        self._schedules: dict[tuple, Any] = {}
        self._call: _PipelineCall | None = None
        self.num_microbatches = num_microbatches
        self.mesh = megatron_mesh(device.type, layout)
        self.tp_group = self.mesh["tp"].get_group()
        self.dp_group = self.mesh["dp"].get_group()
        self.pp_group = self.mesh["pp"].get_group()
        parts = decoder_parts(model)
        if layout.pp_size > 1 and getattr(parts.config, "tie_word_embeddings", False):
            raise ValueError(
                f"pp_size={layout.pp_size}: this model ties its input and output embeddings, which "
                f"would live on different pipeline stages. Use tp_size, or strategy=fsdp."
            )
        full = model.state_dict(keep_vars=True)
        self._aliases = tied_aliases(full)  # gathered once, under the first name, and aliased back
        self._full_meta = {name: (tuple(t.shape), t.dtype) for name, t in full.items() if name not in self._aliases}
        ranges = stage_layer_ranges(parts.config.num_hidden_layers, layout.pp_size)
        self._stage_of_name = {n: _stage_of(n, ranges) for n in full}
        self._stage_names = [
            [n for n, s in self._stage_of_name.items() if s == stage] for stage in range(layout.pp_size)
        ]
        del full
        keep_stage(parts, ranges[layout.pp_rank], layout.is_first_stage, layout.is_last_stage)
        if weights is None:
            model = model.to(device)
        tp_mesh = self.mesh["tp"] if layout.tp_size > 1 else None
        self.sequence_parallel = sequence_parallel and tp_mesh is not None
        if tp_mesh is not None:
            apply_tensor_parallel(parts, tp_mesh, self.sequence_parallel)
        if weights is not None:
            load_weights(materialize(model, device), weights)
        self.stage = DecoderStage(parts, layout.is_first_stage, layout.is_last_stage, tp_mesh, self.sequence_parallel)
        mine = set(model.state_dict())
        if mine != set(self._stage_names[layout.pp_rank]):
            raise RuntimeError(
                f"Pipeline stage {layout.pp_rank} holds {sorted(mine ^ set(self._stage_names[layout.pp_rank]))[:4]} "
                f"unexpectedly: the model's parameter names do not follow the decoder layout."
            )
        super().__init__(
            model,
            device,
            precision,
            optim_cfg,
            state_dict_fn=self._gather_full_state,
            loss_scaler=loss_scaler,
            remove_padding=remove_padding,
        )

    # -- layout --------------------------------------------------------------------------------
    @property
    def dp_rank(self) -> int:
        return self.layout.dp_rank

    @property
    def dp_size(self) -> int:
        return self.layout.dp_size

    @property
    def collects(self) -> bool:
        return self.layout.collects

    # -- forward / backward --------------------------------------------------------------------
    def _sequence_multiple(self) -> int:
        """Sequence parallel splits the sequence evenly over tp ranks: inputs are padded on the right to a
        multiple of tp_size (masked, and causal attention keeps earlier positions unchanged); outputs are
        cut back to the true length."""
        return self.layout.tp_size if self.sequence_parallel else 1

    def _pad_sequence(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids, mask, pos = (batch.tensors[k] for k in ("input_ids", "attention_mask", "position_ids"))
        length = _round_up(ids.shape[1], self._sequence_multiple())
        padded_ids, padded_pos = pad_packed(ids, pos, length)
        return padded_ids, torch.cat([mask, mask.new_zeros(mask.shape[0], length - ids.shape[1])], dim=1), padded_pos

    def model_output(self, batch: Batch, scoring: TokenScoring | None = None) -> ModelOutput:
        """As ``TrainEngine.model_output``, without fused kernels (refused for this strategy at validation)."""
        if self.remove_padding:
            rows = pack_batch(batch)
            ids, pos = pad_packed(
                rows.input_ids, rows.position_ids, _round_up(rows.num_tokens, self._sequence_multiple())
            )
            return PackedOutput(self.stage(ids, None, pos)[:, : rows.num_tokens], rows)
        ids, mask, pos = self._pad_sequence(batch)
        return self.stage(ids, mask, pos)[:, : batch.tensors["input_ids"].shape[1]]

    def forward_micro_batches(
        self, micro: list[Batch], head: Callable[[ModelOutput, Batch], Any], scoring: TokenScoring | None = None
    ) -> list[Any]:
        if self.layout.pp_size == 1:
            return super().forward_micro_batches(micro, head)
        with torch.no_grad():
            return self._run_pipeline(micro, head, train=False)

    def forward_backward(
        self, micro: list[Batch], loss_fn: LossFn, *, average: bool = True, scoring: TokenScoring | None = None
    ) -> list[dict]:
        if self.layout.pp_size == 1:
            return super().forward_backward(micro, loss_fn, average=average)
        return self._run_pipeline(micro, loss_fn, train=True, average=average)

    def _dp_group(self) -> Any:
        return self.dp_group

    def _run_pipeline(self, micro: list[Batch], fn: Callable, train: bool, average: bool = True) -> list[Any]:
        """One pipeline schedule over ``micro`` (equal-size micro-batches in training; packed, any sizes).
        Only the last stage computes ``fn``; it returns the per-micro-batch results there and an empty list
        elsewhere."""
        if self.remove_padding:
            n = len(micro)
            ids, mask, pos, inputs = self._packed_pipeline_inputs(micro)
        else:
            batch = Batch.concat(micro).to(self.device)
            n = self.num_microbatches or len(micro)
            ids, mask, pos = self._pad_sequence(batch)
            seq = batch.tensors["input_ids"].shape[1]

            def inputs(output: torch.Tensor, rows: torch.Tensor) -> tuple[ModelOutput, Batch]:
                return output[:, :seq], batch[rows]

        call = _PipelineCall(inputs, fn, train, n, self.loss_scaler, average)
        schedule = self._schedule_for(tuple(ids.shape), n, train, call)
        layout = self.layout
        args = (ids,) if layout.is_first_stage else ()
        target = torch.arange(ids.shape[0], device=self.device) if layout.is_last_stage else None
        kwargs = {"position_ids": pos} if mask is None else {"attention_mask": mask, "position_ids": pos}
        with self.autocast():
            if train:
                schedule.step(*args, target=target, **kwargs)
            else:
                schedule.eval(*args, target=target, **kwargs)
        # A new schedule first infers activation shapes with one throw-away forward/backward, which also
        # calls the loss on made-up inputs: the real micro-batches are the last ``n`` calls.
        return call.results[-n:] if call.results else []

    def _packed_pipeline_inputs(
        self, micro: list[Batch]
    ) -> tuple[torch.Tensor, None, torch.Tensor, Callable[[torch.Tensor, torch.Tensor], tuple[ModelOutput, Batch]]]:
        """Each micro-batch packed into one row of an (n, length) input, padded to a shared length: the
        schedule gives each micro-batch its own row, whatever its size."""
        micro = [mb.to(self.device) for mb in micro]
        packed: list[PackedRows] = [pack_batch(mb) for mb in micro]
        step = math.lcm(PACKED_LENGTH_STEP, self._sequence_multiple())
        length = _round_up(max(p.num_tokens for p in packed), step)
        rows = [pad_packed(p.input_ids, p.position_ids, length) for p in packed]

        def inputs(output: torch.Tensor, index: torch.Tensor) -> tuple[ModelOutput, Batch]:
            i = int(index[0])
            return PackedOutput(output[:, : packed[i].num_tokens], packed[i]), micro[i]

        return torch.cat([r[0] for r in rows]), None, torch.cat([r[1] for r in rows]), inputs

    def _schedule_for(self, shape: tuple[int, ...], n: int, train: bool, call: _PipelineCall) -> Any:
        """A stage and schedule per input shape: a stage fixes its activation shapes when first run."""
        self._call = call
        key = (shape, n, train)
        if key not in self._schedules:
            layout = self.layout
            stage = PipelineStage(self.stage, layout.pp_rank, layout.pp_size, self.device, group=self.pp_group)
            schedule_cls = ScheduleGPipe if self.schedule == "GPipe" else Schedule1F1B
            self._schedules[key] = schedule_cls(stage, n_microbatches=n, loss_fn=self._loss, scale_grads=False)
        return self._schedules[key]

    def _loss(self, output: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """The schedules' loss function: the current pass's call (set by ``_schedule_for``)."""
        assert self._call is not None
        return self._call(output, rows)

    # -- optimizer step ------------------------------------------------------------------------
    def clip_gradients(self, params: list[nn.Parameter], max_norm: float) -> float:
        """Average gradients over data-parallel replicas, then clip by the norm over the whole model.

        Written here rather than with ``clip_grad_norm_``: the model mixes DTensor (tensor-parallel) and
        plain (replicated) parameters, and pipeline stages each hold a different part of the model."""
        for p in params:  # e.g. sequence-parallel norm weights: per-rank partial sums until reduced
            grad: Any = p.grad  # a DTensor or a tensor: TrainEngine.step passes only parameters with one
            if _is_dtensor(grad) and any(pl.is_partial() for pl in grad.placements):
                p.grad = grad.redistribute(
                    placements=[Replicate() if pl.is_partial() else pl for pl in grad.placements]
                )
        grads: list[Any] = [p.grad for p in params]
        if self.layout.dp_size > 1:
            self._all_reduce_dp(grads)
        sharded = torch.zeros((), dtype=torch.float64, device=self.device)
        replicated = torch.zeros((), dtype=torch.float64, device=self.device)
        for grad in grads:
            sq = _local(grad).detach().double().pow(2).sum()
            if _is_dtensor(grad) and any(pl.is_shard() for pl in grad.placements):
                sharded += sq
            else:  # equal on every tensor-parallel rank: count once
                replicated += sq
        if self.layout.tp_size > 1:
            dist.all_reduce(sharded, group=self.tp_group)
        total = sharded + replicated
        if self.layout.pp_size > 1:
            dist.all_reduce(total, group=self.pp_group)
        norm = math.sqrt(float(total))
        if math.isfinite(norm) and norm > max_norm:
            coef = max_norm / (norm + 1e-6)
            for grad in grads:
                _local(grad).mul_(coef)
        return norm

    def _all_reduce_dp(self, grads: list[Any]) -> None:
        """One bucketed all-reduce of every local gradient, averaged over replicas."""
        locals_ = [_local(g) for g in grads]
        flat = torch.cat([g.reshape(-1).float() for g in locals_])
        dist.all_reduce(flat, group=self.dp_group)
        flat /= self.layout.dp_size
        offset = 0
        for g in locals_:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()

    # -- full weights --------------------------------------------------------------------------
    def _gather_full_state(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's Hugging Face state dict on every rank (export, digests)."""
        out = dict(self.iter_full_weights())
        out.update({alias: out[name] for alias, name in self._aliases.items()})
        return out

    def iter_full_weights(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor of the whole model, one at a time on every rank: tensor-parallel shards are cast
        then gathered within the stage, and the owning stage broadcasts it along the pipeline. Tied
        weights come once, under their first name."""
        local = self.model.state_dict()
        layout = self.layout
        for name, (shape, saved_dtype) in self._full_meta.items():
            stage = self._stage_of_name[name]
            out_dtype = dtype if dtype is not None and saved_dtype.is_floating_point else saved_dtype
            if stage == layout.pp_rank:
                tensor = local[name].detach().to(out_dtype)
                tensor = (tensor.full_tensor() if _is_dtensor(tensor) else tensor).contiguous()
            else:
                tensor = torch.empty(shape, dtype=out_dtype, device=self.device)
            if layout.pp_size > 1:
                src = (stage * layout.dp_size + layout.dp_rank) * layout.tp_size + layout.tp_rank
                dist.broadcast(tensor, src=src, group=self.pp_group)
            yield name, tensor
