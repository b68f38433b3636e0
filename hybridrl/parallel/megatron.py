"""Megatron-style parallelism built on PyTorch: tensor and sequence parallel with DTensor, pipeline stages
for ``torch.distributed.pipelining``, data parallel across the rest.

megatron-core itself needs CUDA (see DESIGN.md), so this follows torchtitan's approach: one code path on
CPU/gloo and GPU/NCCL. The rank layout is Megatron's: tensor-parallel ranks are adjacent (the fastest
links), then data parallel, then pipeline stages (``rank = (pp * dp_size + dp) * tp_size + tp``).

Tensor parallel follows the model's own ``base_model_tp_plan`` (q/k/v/gate/up column-wise, o/down
row-wise). Sequence parallel adds Megatron's sequence split of the norms and residual stream: hidden
states between the attention and MLP blocks are sharded along the sequence and gathered inside them.
The embedding and the LM head are vocabulary-parallel (Megatron's split of the vocabulary rows) unless
the model ties them, in which case they stay replicated. The final norm and the critic's value head are
replicated; their gradients are equal on every tensor-parallel rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridrl.models.decoder_stage import DecoderParts


@dataclass(frozen=True)
class MegatronLayout:
    """Where one rank sits in the (pp, dp, tp) grid."""

    world_size: int
    tp_size: int
    pp_size: int
    rank: int

    @property
    def dp_size(self) -> int:
        return self.world_size // (self.tp_size * self.pp_size)

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp_size

    @property
    def dp_rank(self) -> int:
        return (self.rank // self.tp_size) % self.dp_size

    @property
    def pp_rank(self) -> int:
        return self.rank // (self.tp_size * self.dp_size)

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def collects(self) -> bool:
        """The one rank per data-parallel replica whose results the driver gathers."""
        return self.tp_rank == 0 and self.is_last_stage


def megatron_fit_errors(
    role: str,
    *,
    workers: int,
    tp_size: int,
    pp_size: int,
    num_heads: int,
    num_kv_heads: int,
    num_layers: int,
    tied_embeddings: bool = False,
    has_tp_plan: bool = True,
    model_type: str = "",
) -> list[str]:
    """Why this tp/pp layout cannot run this model on ``workers`` ranks (empty when it can)."""
    errors = []
    key = f"{role}.parallel_config.megatron"
    if tp_size < 1 or pp_size < 1:
        return [f"{key}: tp_size ({tp_size}) and pp_size ({pp_size}) must be at least 1."]
    if num_heads % tp_size or num_kv_heads % tp_size:
        errors.append(
            f"{key}.tp_size={tp_size} must divide the model's {num_heads} attention heads and "
            f"{num_kv_heads} key/value heads. Pick a common divisor, e.g. "
            f"{max(d for d in range(1, num_kv_heads + 1) if num_heads % d == 0 and num_kv_heads % d == 0)}."
        )
    if pp_size > num_layers:
        errors.append(
            f"{key}.pp_size={pp_size} exceeds the model's {num_layers} layers: every pipeline stage "
            f"needs at least one layer. Use pp_size <= {num_layers}."
        )
    if workers % (tp_size * pp_size):
        errors.append(
            f"{role}: tp_size x pp_size = {tp_size} x {pp_size} = {tp_size * pp_size} must divide the "
            f"role's {workers} workers (dp x tp x pp = workers). Resize the pool or the layout."
        )
    if tp_size > 1 and not has_tp_plan:
        errors.append(
            f"{key}.tp_size={tp_size}: the '{model_type}' model declares no tensor-parallel plan "
            f"(base_model_tp_plan); use tp_size=1 or strategy=fsdp for it."
        )
    if tied_embeddings and pp_size > 1:
        errors.append(
            f"{key}.pp_size={pp_size}: the model ties its input and output embeddings, which would "
            f"live on different pipeline stages; pipeline parallel supports untied models only. "
            f"Use tp_size instead, or strategy=fsdp."
        )
    return errors


def megatron_mesh(device_type: str, layout: MegatronLayout):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(
        device_type, (layout.pp_size, layout.dp_size, layout.tp_size), mesh_dim_names=("pp", "dp", "tp")
    )


def _tp_styles(plan_kind: str, sequence_parallel: bool):
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if plan_kind == "colwise":
        return ColwiseParallel()
    if plan_kind == "rowwise":
        # Under sequence parallel the output is reduce-scattered along the sequence and stays a DTensor
        # so that the residual add happens on sequence shards.
        if sequence_parallel:
            return RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
        return RowwiseParallel()
    raise ValueError(f"Unsupported tensor-parallel plan entry '{plan_kind}' (supported: colwise, rowwise).")


def apply_tensor_parallel(parts: DecoderParts, tp_mesh: Any, sequence_parallel: bool) -> None:
    """Shard this stage's decoder layers over ``tp_mesh`` following the model's tensor-parallel plan."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import PrepareModuleInput, SequenceParallel, parallelize_module

    plan = getattr(parts.config, "base_model_tp_plan", None) or {}
    layer_plan = {key.split("layers.*.", 1)[1]: kind for key, kind in plan.items() if key.startswith("layers.*.")}
    if not layer_plan:
        raise ValueError(
            f"{type(parts.backbone).__name__} declares no tensor-parallel plan "
            f"(config.base_model_tp_plan); use strategy=fsdp for this model."
        )
    for layer in parts.backbone.layers.values():
        styles: dict[str, Any] = {name: _tp_styles(kind, sequence_parallel) for name, kind in layer_plan.items()}
        if sequence_parallel:
            gather = dict(
                input_kwarg_layouts={"hidden_states": Shard(1)},
                desired_input_kwarg_layouts={"hidden_states": Replicate()},
            )
            styles.update(
                {
                    "input_layernorm": SequenceParallel(),
                    "post_attention_layernorm": SequenceParallel(),
                    "self_attn": PrepareModuleInput(**gather),
                    "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                }
            )
        parallelize_module(layer, tp_mesh, styles)
    if sequence_parallel and parts.backbone.norm is not None:
        parallelize_module(parts.backbone.norm, tp_mesh, SequenceParallel())
    if not _tied(parts):
        _apply_vocab_parallel(parts, tp_mesh, sequence_parallel)


def _tied(parts: DecoderParts) -> bool:
    return bool(
        getattr(parts.model.config if hasattr(parts.model, "config") else parts.config, "tie_word_embeddings", False)
    )


def _apply_vocab_parallel(parts: DecoderParts, tp_mesh: Any, sequence_parallel: bool) -> None:
    """Megatron's vocabulary-parallel embedding and output layer: each rank holds vocab / tp rows. The
    embedding's partial sums are all-reduced (or reduce-scattered along the sequence under sequence
    parallel); the head's logits are all-gathered. Tied embeddings stay replicated: one weight cannot be
    split two ways."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    if parts.backbone.embed_tokens is not None:
        style = (
            RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)
            if sequence_parallel
            else RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        )
        parallelize_module(parts.backbone.embed_tokens, tp_mesh, style)
    if parts.head_name == "lm_head" and parts.head is not None:
        parallelize_module(parts.head, tp_mesh, ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()))
