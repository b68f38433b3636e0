"""A decoder language model's sizes read from its ``config.json`` alone: what the memory plan needs, with no
weights and no model code (``hybridrl plan`` answers in a couple of seconds, starting nothing).

The count follows the Llama/Qwen2/Mistral layout that the supported models share: embeddings, per layer
q/k/v/o projections (Qwen2's q/k/v biases), a gated MLP and two norms, a final norm and an untied head.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from hybridrl.config.schema import ModelConfig


@dataclass(frozen=True)
class ModelShape:
    """The sizes of one decoder-only language model."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    tied: bool = False
    qkv_bias: bool = False

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linear_layers(self) -> list[tuple[int, int]]:
        """``(in, out)`` of each linear layer of one decoder layer: what LoRA's all-linear adapts."""
        q, kv, d, f = self.heads * self.head_dim, self.kv_dim, self.hidden, self.ffn
        return [(d, q), (d, kv), (d, kv), (q, d), (d, f), (d, f), (f, d)]

    @property
    def layer_params(self) -> int:
        bias = self.heads * self.head_dim + 2 * self.kv_dim if self.qkv_bias else 0
        return sum(i * o for i, o in self.linear_layers()) + bias + 2 * self.hidden

    @property
    def embedding(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Every parameter of the causal LM (the policy, the reference, the generation copy)."""
        head = 0 if self.tied else self.embedding
        return self.embedding + self.layers * self.layer_params + self.hidden + head

    @property
    def value_model_params(self) -> int:
        """The critic: the same body with a one-output value head instead of the vocabulary head."""
        return self.embedding + self.layers * self.layer_params + self.hidden + self.hidden + 1

    @property
    def largest_tensor(self) -> int:
        return max(self.embedding, *(i * o for i, o in self.linear_layers()))

    def lora_params(self, rank: int) -> int:
        """Adapters on every linear layer of every decoder layer (PEFT's all-linear): r x (in + out) each."""
        return self.layers * sum(rank * (i + o) for i, o in self.linear_layers())

    def activation_bytes_per_token(self, dtype_bytes: int, checkpointed: bool) -> int:
        """What autograd keeps per token through the decoder layers: each layer's inputs of its matmuls,
        attention and MLP (6 x hidden + 2 x kv + 4 x ffn values), or with activation checkpointing each
        layer's input plus one layer recomputed at a time."""
        per_layer = 6 * self.hidden + 2 * self.kv_dim + 4 * self.ffn
        kept = self.layers * self.hidden + per_layer if checkpointed else self.layers * per_layer
        return kept * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes


def read_shape(model_dir: str | Path) -> ModelShape:
    """The shape in ``model_dir/config.json``; one line naming the key when the file cannot say it."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ValueError(
            f"plan: no config.json in {model_dir}; point actor_rollout_ref.model.path at a model directory."
        )
    config = json.loads(path.read_text())
    config = {**config.get("text_config", {}), **config}  # multimodal configs nest the language model's
    try:
        hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        return ModelShape(
            vocab=int(config["vocab_size"]),
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            ffn=int(config["intermediate_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
        )
    except KeyError as exc:
        raise ValueError(
            f"plan: {path} has no {exc.args[0]!r}: the planner reads decoder models of the Llama/Qwen2 layout."
        ) from None


def model_shape(model: ModelConfig) -> ModelShape:
    """The shape of the run's policy: ``model.path``'s config, or the built-in tiny model's."""
    if model.path is not None:
        return read_shape(model.path)
    # The built-in model's vocabulary is its tokenizer's: imported only here, since it loads transformers.
    from hybridrl.models.tiny import CHARACTERS, SPECIAL_TOKENS  # noqa: PLC0415

    tiny = model.tiny
    return ModelShape(
        vocab=len(SPECIAL_TOKENS) + len(CHARACTERS),
        hidden=tiny.hidden_size,
        layers=tiny.num_hidden_layers,
        heads=tiny.num_attention_heads,
        kv_heads=tiny.num_key_value_heads,
        head_dim=tiny.hidden_size // tiny.num_attention_heads,
        ffn=tiny.intermediate_size,
        qkv_bias=True,
    )
