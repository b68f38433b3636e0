"""The FSDP training engine: FSDP2 (``fully_shard``) over the group's ranks, built the way the Megatron engine
is: from an empty or single-device model, its strategy applied inside the engine's constructor; with
Ulysses sequence parallelism (``hybridrl.engine.fsdp.ulysses``), each sequence split over groups of ranks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from hybridrl.algorithms.token_logprobs import TokenScores, TokenScoring
from hybridrl.config.choices import Precision, ShardingStrategy
from hybridrl.config.schema import FSDPConfig, OptimConfig
from hybridrl.engine.base import TrainEngine, WeightShard
from hybridrl.engine.fsdp.sharding import apply_fsdp, fsdp_mesh, full_state_dict
from hybridrl.engine.fsdp.ulysses import UlyssesLayout, gather_sequence, slice_packed, ulysses_mesh
from hybridrl.engine.packing import ModelOutput, PackedOutput, pack_batch
from hybridrl.engine.precision import DynamicLossScaler
from hybridrl.models import lora, ulysses
from hybridrl.models.weights import WeightSource, load_weights, materialize, tied_aliases

if TYPE_CHECKING:
    from hybridrl.protocol import Batch


#: DDP's default gradient bucket (``bucket_cap_mb=25``).
_BUCKET_BYTES = 25 * 2**20


def _buckets(grads: list[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Consecutive gradients of one dtype, up to ``_BUCKET_BYTES`` a bucket (a larger one alone)."""
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in grads:
        nbytes = grad.numel() * grad.element_size()
        if bucket and (grad.dtype != bucket[0].dtype or size + nbytes > _BUCKET_BYTES):
            yield bucket
            bucket, size = [], 0
        bucket.append(grad)
        size += nbytes
    if bucket:
        yield bucket


class FSDPEngine(TrainEngine):
    def __init__(
        self,
        model: nn.Module,
        fsdp: FSDPConfig,
        mesh: DeviceMesh,
        device: torch.device,
        *,
        ranks_per_node: int | None = None,
        precision: Precision = Precision.fp32,
        optim_cfg: OptimConfig | None = None,
        loss_scaler: DynamicLossScaler | None = None,
        weights: WeightSource | None = None,
        remove_padding: bool = False,
        fused_kernels: bool = False,
        share_prompts: bool = False,
        sequence_parallel: int = 1,
    ) -> None:
        """``mesh`` is the group's 1-D mesh; NO_SHARD and HYBRID_SHARD build their 2-D one from the same
        ranks. With ``weights``, ``model`` is empty (meta parameters): it is sharded first, then each rank
        allocates and reads only its shards, so no rank ever holds the whole model. ``sequence_parallel``:
        Ulysses over groups of that many ranks (packed rows only: ``remove_padding``)."""
        self.ulysses: UlyssesLayout | None = None
        self.shard: ulysses.SequenceShard | None = None
        if sequence_parallel > 1:
            if not remove_padding:
                raise ValueError("Ulysses sequence parallelism splits packed rows: it needs use_remove_padding.")
            self.ulysses = UlyssesLayout(mesh.size(), sequence_parallel, mesh.get_rank())
            sp_mesh = ulysses_mesh(device.type, self.ulysses)
            self._replica_group = sp_mesh["dp"].get_group()
            self.shard = ulysses.SequenceShard(sp_mesh["sp"].get_group(), sequence_parallel, self.ulysses.sp_rank)
            layers = ulysses.attach(model, self.shard)
            expected = getattr(getattr(model, "config", None), "num_hidden_layers", layers)
            if layers == 0 or layers != expected:
                raise ValueError(
                    f"Ulysses sequence parallelism found {layers} attention layers in {type(model).__name__} "
                    f"(config: {expected}); it needs Hugging Face attention modules (head_dim, layer_idx)."
                )
        needs_fsdp2 = fsdp.mixed_precision or fsdp.cpu_offload
        # NO_SHARD without FSDP2's policies is data parallelism (DDP): every rank holds the whole model as a
        # plain module and the gradients are averaged, bucket by bucket, before each optimizer step
        # (``reduce_gradients``). FSDP2 on a (replicas x 1) mesh computes the same but turns every parameter
        # into a DTensor and runs its hooks, with a collective per layer, around every forward and backward.
        # None: no replicas to average over (another layout, or one rank).
        replicated = fsdp.sharding_strategy == ShardingStrategy.NO_SHARD and not needs_fsdp2 and mesh.size() > 1
        self._replicas = mesh.get_group() if replicated else None
        if fsdp.sharding_strategy == ShardingStrategy.HYBRID_SHARD or (
            fsdp.sharding_strategy == ShardingStrategy.NO_SHARD and needs_fsdp2
        ):
            group = fsdp.shard_group_size or ranks_per_node or mesh.size()
            mesh = fsdp_mesh(device.type, mesh.size(), fsdp.sharding_strategy, group)
        if weights is None:
            model = model.to(device)
        # One rank has nothing to shard: FSDP2 would still turn every parameter into a DTensor and run its
        # hooks around every forward and backward (~0.25 s of a 0.9 s W1 step, bench/w1.py), so a plain
        # module does the same computation. Its mixed-precision and CPU-offload policies still need FSDP2.
        if (mesh.size() > 1 and self._replicas is None) or needs_fsdp2:
            model = apply_fsdp(
                model,
                mesh,
                fsdp.sharding_strategy,
                fsdp.mixed_precision,
                fsdp.cpu_offload,
                fsdp.limit_all_gathers,
                param_dtype=torch.float16 if precision == Precision.fp16 else torch.bfloat16,
            )
        if weights is not None:  # FSDP2's CPU offload keeps the sharded parameters on the host
            load_weights(materialize(model, torch.device("cpu") if fsdp.cpu_offload else device), weights)
        super().__init__(
            model,
            device,
            precision,
            optim_cfg,
            state_dict_fn=full_state_dict,
            loss_scaler=loss_scaler,
            remove_padding=remove_padding,
            fused_kernels=fused_kernels,
            share_prompts=share_prompts,
        )

    def reduce_gradients(self, params: list[nn.Parameter]) -> None:
        """Replicated (NO_SHARD as data parallelism): average the gradients over the group, one all-reduce per
        bucket of DDP's default size, so the reduction holds one bucket beyond the gradients, not a copy of
        them all (the tiny model is one bucket)."""
        if self._replicas is None:
            return
        world = dist.get_world_size(self._replicas)
        for bucket in _buckets([p.grad for p in params if p.grad is not None]):
            if len(bucket) == 1:  # a gradient of a bucket's size or more: reduced in place
                dist.all_reduce(bucket[0], group=self._replicas)
                bucket[0] /= world
                continue
            flat = torch._utils._flatten_dense_tensors(bucket)
            dist.all_reduce(flat, group=self._replicas)
            flat /= world
            for grad, reduced in zip(bucket, torch._utils._unflatten_dense_tensors(flat, bucket), strict=True):
                grad.copy_(reduced)

    def iter_weight_shards(self, dtype: torch.dtype | None = None) -> Iterator[WeightShard] | None:
        """Each weight's dim-0 shard this rank holds under FSDP2 on one mesh dimension (FULL_SHARD,
        SHARD_GRAD_OP): ``torch.chunk``'s split, rank r rows [r * c, (r + 1) * c) of c = ceil(rows / W). None
        for layouts that replicate (NO_SHARD, HYBRID_SHARD: every replica would send) and for LoRA (the
        hand-over sends merged weights, which need the whole base tensor)."""
        if lora.scalings(self.model) or self._replicas is not None:
            return None
        state = self.model.state_dict(keep_vars=True)
        aliases = tied_aliases(state)
        for name, tensor in state.items():
            placements = getattr(tensor, "placements", None)
            if placements is not None and (len(placements) != 1 or not placements[0].is_shard(0)):
                return None
            if tensor.dim() == 0 and name not in aliases:
                return None  # a scalar weight has no rows to split
        first = not dist.is_initialized() or dist.get_rank() == 0

        def shards() -> Iterator[WeightShard]:
            for name, param in state.items():
                if name in aliases:
                    continue
                tensor = param.detach()
                if dtype is not None and tensor.is_floating_point():
                    tensor = tensor.to(dtype)
                if hasattr(tensor, "to_local"):  # this rank's chunk of its shard mesh
                    rows, mesh = tensor.shape[0], tensor.device_mesh
                    chunk = -(-rows // mesh.size())
                    yield WeightShard(name, tensor.to_local(), min(mesh.get_local_rank() * chunk, rows), rows)
                elif first:  # not sharded: every rank holds it, the first sends it
                    yield WeightShard(name, tensor, 0, tensor.shape[0])

        return shards()

    # -- Ulysses: a replica is ``sequence_parallel`` consecutive ranks, each computing part of every sequence ----
    @property
    def dp_rank(self) -> int:
        return super().dp_rank if self.ulysses is None else self.ulysses.dp_rank

    @property
    def dp_size(self) -> int:
        return super().dp_size if self.ulysses is None else self.ulysses.dp_size

    @property
    def collects(self) -> bool:
        return self.ulysses is None or self.ulysses.collects

    @property
    def sequence_parallel_size(self) -> int:
        return 1 if self.ulysses is None else self.ulysses.size

    def _dp_group(self) -> Any:
        return None if self.ulysses is None else self._replica_group

    def model_output(self, batch: Batch, scoring: TokenScoring | None = None) -> ModelOutput:
        """As ``TrainEngine.model_output``; under Ulysses each rank runs its slice of the packed rows, and
        the per-token results (response scores from the output head's hidden states, values, or the
        response positions' logits where no ``scoring`` is given) are gathered over its group."""
        if self.shard is None:
            return super().model_output(batch, scoring)
        t = batch.tensors
        rows = pack_batch(batch)
        part = slice_packed(rows, self.shard)
        inputs: dict[str, Any] = {
            "input_ids": part.input_ids,
            "attention_mask": None,
            "position_ids": part.position_ids,
        }
        if not (self._keeps_logits and "responses" in t):  # values, or every position's logits
            out = self.model(**inputs)
            out = gather_sequence(getattr(out, "logits", out), part.token_counts, self.shard)
            return PackedOutput(out[:, : rows.num_tokens], rows)
        assert part.keep is not None and part.mine is not None and part.counts is not None
        assert rows.response_flat is not None
        inputs["logits_to_keep"] = part.keep
        if scoring is None:
            logits = self.model(**inputs).logits
            return PackedOutput(gather_sequence(logits, part.counts, self.shard), rows, at_responses=True)
        labels = t["responses"].reshape(-1)[rows.response_flat][part.mine].unsqueeze(0)
        with self._scoring_head(labels, scoring):
            scores = self.model(**inputs).logits  # (1, positions here, 2): log-prob, entropy
        scores = gather_sequence(scores, part.counts, self.shard)
        log_probs, entropy = rows.unpack_responses(scores[..., 0]), rows.unpack_responses(scores[..., 1])
        return TokenScores(log_probs, entropy if scoring.with_entropy else None)
