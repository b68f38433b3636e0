"""A decoder-only Hugging Face model run layer by layer: the unit of pipeline and sequence parallelism.

Hugging Face's ``forward`` runs every layer and builds its masks from the full hidden states, so it can
run neither a slice of the layers (a pipeline stage) nor hidden states split along the sequence (sequence
parallel). ``DecoderStage`` runs the same modules in the same order with the same masks (built by
``transformers.masking_utils``) but takes a contiguous range of layers, and keeps the model's own module
names so that state dicts and checkpoints use the Hugging Face names.

Supported: models whose backbone has ``embed_tokens``, ``layers``, ``norm`` and ``rotary_emb`` (the
Llama/Qwen2/Mistral family), as causal LMs (``lm_head``: logits) or as our ``ValueModel`` (``value_head``:
one value per position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

BACKBONE_PARTS = ("embed_tokens", "layers", "norm", "rotary_emb")


@dataclass
class DecoderParts:
    """Where the pieces of a decoder model live (attribute owners, so they can be dropped per stage)."""

    # Hugging Face modules whose parts (embed_tokens, layers, norm, rotary_emb, config) are looked up by
    # name and dropped per stage: typed Any, as nn.Module's attribute access cannot say what they are.
    model: Any
    backbone: Any
    head_owner: Any
    head_name: str  # "lm_head" (logits) or "value_head" (values)

    @property
    def head(self) -> nn.Module | None:
        return getattr(self.head_owner, self.head_name)

    @property
    def config(self):
        return self.backbone.config


def decoder_parts(model: nn.Module) -> DecoderParts:
    """Find the backbone and head of a causal LM or a ``ValueModel``; refuse other layouts clearly."""
    if hasattr(model, "value_head") and hasattr(model, "backbone"):
        parts = DecoderParts(model, model.backbone, model, "value_head")
    elif hasattr(model, "lm_head") and hasattr(model, "model"):
        parts = DecoderParts(model, model.model, model, "lm_head")
    else:
        raise ValueError(
            f"{type(model).__name__} is not a decoder-only causal LM or value model; the megatron "
            f"strategy needs one (use strategy=fsdp for other models)."
        )
    missing = [name for name in BACKBONE_PARTS if not hasattr(parts.backbone, name)]
    if missing:
        raise ValueError(
            f"{type(parts.backbone).__name__} has no {missing}: the megatron strategy supports the "
            f"Llama/Qwen2/Mistral family of decoders. Use strategy=fsdp for this model."
        )
    return parts


def stage_layer_ranges(num_layers: int, num_stages: int) -> list[range]:
    """Contiguous, balanced layer ranges per pipeline stage (earlier stages take the remainder, since the
    last stage also runs the norm, the head and the loss)."""
    if not 1 <= num_stages <= num_layers:
        raise ValueError(f"pp_size ({num_stages}) must be between 1 and the model's {num_layers} layers.")
    base, extra = divmod(num_layers, num_stages)
    ranges, start = [], 0
    for stage in range(num_stages):
        size = base + (1 if stage < extra else 0)
        ranges.append(range(start, start + size))
        start += size
    return ranges


def keep_stage(parts: DecoderParts, layers: range, is_first: bool, is_last: bool) -> None:
    """Drop everything this stage does not run, in place. Layers go into a ``ModuleDict`` keyed by their
    original index, so parameter names stay ``model.layers.<i>.…`` as in the full model."""
    backbone = parts.backbone
    backbone.layers = nn.ModuleDict({str(i): backbone.layers[i] for i in layers})
    if not is_first:
        backbone.embed_tokens = None
    if not is_last:
        backbone.norm = None
        setattr(parts.head_owner, parts.head_name, None)


class DecoderStage(nn.Module):
    """``forward(x, attention_mask, position_ids)``: ``x`` is input ids on the first stage and the previous
    stage's hidden states elsewhere; the last stage returns logits (B, T, V) or values (B, T), the others
    hidden states. Under sequence parallel, hidden states between layers are sharded along the sequence
    (``Shard(1)`` DTensors) and travel between stages as each rank's local slice."""

    def __init__(
        self, parts: DecoderParts, is_first: bool, is_last: bool, tp_mesh=None, sequence_parallel: bool = False
    ) -> None:
        super().__init__()
        self.inner = parts.model
        self.parts = parts
        self.is_first = is_first
        self.is_last = is_last
        self.tp_mesh = tp_mesh
        self.sequence_parallel = sequence_parallel and tp_mesh is not None

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``attention_mask`` None: packed rows (``hybridrl.engine.packing``), kept apart by their
        ``position_ids``, which restart at 0 for each row."""
        assert position_ids is not None, "the stage needs position ids"
        backbone = self.parts.backbone
        config = self.parts.config
        hidden: Any = backbone.embed_tokens(x) if self.is_first else x  # a DTensor under sequence parallel
        local = hidden.to_local() if hasattr(hidden, "to_local") else hidden
        batch, seq = position_ids.shape
        # The masks need only the batch/sequence shape, dtype and device of the embeddings.
        probe = local.new_empty(batch, seq, 1)
        mask_kwargs = dict(
            config=config, inputs_embeds=probe, attention_mask=attention_mask, cache=None, position_ids=position_ids
        )
        masks = {"full_attention": create_causal_mask(**mask_kwargs)}
        if getattr(backbone, "has_sliding_layers", False):
            masks["sliding_attention"] = create_sliding_window_causal_mask(**mask_kwargs)
        position_embeddings = backbone.rotary_emb(probe, position_ids)
        if self.sequence_parallel:
            hidden = self._to_sequence_shards(hidden)
        layer_types = getattr(config, "layer_types", None)
        for index, layer in backbone.layers.items():
            kind = layer_types[int(index)] if layer_types else "full_attention"
            hidden = layer(
                hidden,
                attention_mask=masks[kind],
                position_ids=position_ids,
                position_embeddings=position_embeddings,
                use_cache=False,
            )
            if isinstance(hidden, tuple):  # older transformers return (hidden, ...)
                hidden = hidden[0]
        if not self.is_last:
            return hidden.to_local() if self.sequence_parallel else hidden
        hidden = backbone.norm(hidden)
        if self.sequence_parallel:
            hidden = hidden.full_tensor()  # the head sees every position
        head = self.parts.head
        assert head is not None, "the last pipeline stage keeps its head"
        out = head(hidden)
        return out.squeeze(-1) if self.parts.head_name == "value_head" else out

    def _to_sequence_shards(self, hidden: torch.Tensor) -> torch.Tensor:
        if hasattr(hidden, "placements"):  # a vocabulary-parallel embedding already reduce-scattered it
            return hidden
        if self.is_first:  # the embedding output is whole on every rank: keep this rank's slice
            full = DTensor.from_local(hidden, self.tp_mesh, [Replicate()], run_check=False)
            return full.redistribute(self.tp_mesh, [Shard(1)])
        return DTensor.from_local(hidden, self.tp_mesh, [Shard(1)], run_check=False)
