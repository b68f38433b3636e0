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

from typing import TYPE_CHECKING, Any

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from hybridrl.engine.megatron.layout import MegatronLayout

if TYPE_CHECKING:
    from hybridrl.models.decoder_stage import DecoderParts


def megatron_mesh(device_type: str, layout: MegatronLayout) -> DeviceMesh:
    return init_device_mesh(
        device_type, (layout.pp_size, layout.dp_size, layout.tp_size), mesh_dim_names=("pp", "dp", "tp")
    )


def _tp_styles(plan_kind: str, sequence_parallel: bool):
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
            styles.update(
                {
                    "input_layernorm": SequenceParallel(),
                    "post_attention_layernorm": SequenceParallel(),
                    "self_attn": PrepareModuleInput(
                        input_kwarg_layouts={"hidden_states": Shard(1)},
                        desired_input_kwarg_layouts={"hidden_states": Replicate()},
                    ),
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
    if parts.backbone.embed_tokens is not None:
        style = (
            RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False)
            if sequence_parallel
            else RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
        )
        parallelize_module(parts.backbone.embed_tokens, tp_mesh, style)
    if parts.head_name == "lm_head" and parts.head is not None:
        parallelize_module(parts.head, tp_mesh, ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()))
