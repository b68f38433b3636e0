"""Analytic matmul FLOPs of dense decoder-only transformers (Qwen2 / Llama / Mistral style).

Why analytic: MFU needs the FLOPs the model *must* do, independent of kernels or recomputation,
so it is computed from the HF config, the way verl's FlopsCounter and Megatron do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: A training pass is forward + backward; backward costs twice the forward (grads w.r.t.
#: activations and w.r.t. weights), hence 3x. Activation recomputation is *not* counted, so MFU
#: stays comparable across checkpointing settings (this is "model" FLOPs, not "hardware" FLOPs).
TRAIN_PASS_MULTIPLIER = 3


def _get(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        value = config.get(name, default)
    else:
        value = getattr(config, name, default)
    return default if value is None else value


@dataclass(frozen=True)
class FlopsModel:
    """Shapes of a dense decoder-only LM that determine its matmul FLOPs."""

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False

    @classmethod
    def from_hf_config(cls, config: Any) -> FlopsModel:
        """Read a HF ``PretrainedConfig`` (or a plain mapping with the same keys).

        Multimodal wrappers expose the LM through ``get_text_config()``; it returns the config
        itself for plain LMs, so it is used when present.
        """
        if hasattr(config, "get_text_config"):
            config = config.get_text_config()
        hidden = int(_get(config, "hidden_size"))
        heads = int(_get(config, "num_attention_heads"))
        model = cls(
            hidden_size=hidden,
            num_layers=int(_get(config, "num_hidden_layers")),
            num_heads=heads,
            num_kv_heads=int(_get(config, "num_key_value_heads", heads)),
            head_dim=int(_get(config, "head_dim", hidden // heads)),
            intermediate_size=int(_get(config, "intermediate_size")),
            vocab_size=int(_get(config, "vocab_size")),
            tie_word_embeddings=bool(_get(config, "tie_word_embeddings", False)),
        )
        logger.debug("FlopsModel from config: %s", model)
        return model

    def layer_params(self) -> int:
        """Weights of the decoder layers that multiply every token: attention projections and MLP.
        Biases and norms are elementwise and ignored."""
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        attn = self.hidden_size * q_out + 2 * self.hidden_size * kv_out + q_out * self.hidden_size
        mlp = 3 * self.hidden_size * self.intermediate_size  # gate, up, down
        return self.num_layers * (attn + mlp)

    def head_params(self) -> int:
        """The output head's weights: a matmul even when tied to the embedding (a gather)."""
        return self.hidden_size * self.vocab_size

    def matmul_params(self) -> int:
        """Weights that multiply every token when every position's logits are computed."""
        return self.layer_params() + self.head_params()

    def describe(self) -> str:
        """The shape in one line, for the run log: what a user compares with another framework's MFU."""
        return (
            f"hidden {self.hidden_size}, {self.num_layers} layers, {self.num_heads} heads ({self.num_kv_heads} KV) "
            f"x {self.head_dim}, FFN {self.intermediate_size}, vocabulary {self.vocab_size}: "
            f"{self.layer_params() / 1e9:.3f} B layer weights + {self.head_params() / 1e9:.3f} B head"
        )

    def attention_flops(self, seq_len: int) -> float:
        """Scores (QK^T) and weighted sum (AV) for one sequence, all layers.

        Causal masking is counted as full ``seq^2`` like verl / Megatron do: kernels such as
        FlashAttention skip masked blocks, but counting the full square keeps our MFU comparable
        with theirs (it overstates attention work by up to 2x for long sequences).
        """
        return float(2 * 2 * seq_len * seq_len * self.num_heads * self.head_dim * self.num_layers)

    def forward_flops(self, seq_lens: Sequence[int], head_tokens: int | None = None) -> float:
        """Matmul FLOPs of one forward over independent sequences of these lengths. ``head_tokens``: the
        positions whose logits are computed (the trainer's passes compute them only where a response token
        is predicted, generation once per sampled token); None = every position."""
        total_tokens = 0
        attn = 0.0
        for s in seq_lens:
            s = int(s)
            if s < 0:
                raise ValueError(f"negative sequence length {s}")
            total_tokens += s
            attn += self.attention_flops(s)
        head = total_tokens if head_tokens is None else int(head_tokens)
        return 2.0 * (self.layer_params() * total_tokens + self.head_params() * head) + attn
