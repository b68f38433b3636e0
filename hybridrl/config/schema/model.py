"""The policy's model (a Hugging Face directory, or the built-in tiny model), and the critic's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridrl.config.schema.fields import at_least, doc, section, values_of


@dataclass(frozen=True)
class TinyModelConfig:
    hidden_size: int = doc(64, "")
    num_hidden_layers: int = doc(2, "")
    num_attention_heads: int = doc(4, "")
    num_key_value_heads: int = doc(2, "")
    intermediate_size: int = doc(128, "")
    seed: int = doc(0, "seed of the tiny model's initial weights")

    def problems(self, at: str) -> list[str]:
        """The built-in model's shape: every size positive, the heads dividing the width and each other."""
        sizes = at_least(
            1,
            at,
            **values_of(
                self, "hidden_size num_hidden_layers num_attention_heads num_key_value_heads intermediate_size"
            ),
        )
        return sizes or self._head_problems(at)  # a size below 1 leaves nothing to divide

    def _head_problems(self, at: str) -> list[str]:
        """One problem at a time: the key/value heads are checked against a head count that fits the width."""
        heads, kv_heads = self.num_attention_heads, self.num_key_value_heads
        if self.hidden_size % heads or (self.hidden_size // heads) % 2:
            return [
                f"{at}.num_attention_heads={heads} must divide hidden_size={self.hidden_size} into heads of an "
                f"even width (rotary embeddings)."
            ]
        if heads % kv_heads:
            return [f"{at}.num_key_value_heads={kv_heads} must divide num_attention_heads={heads}."]
        return []


@dataclass(frozen=True)
class ModelConfig:
    path: str | None = doc(None, "local Hugging Face model directory; null = build the tiny model below")
    tokenizer_path: str | None = doc(None, "tokenizer directory; null = same as model.path")
    trust_remote_code: bool = doc(False, "allow custom modelling code shipped with the model")
    enable_gradient_checkpointing: bool = doc(
        False, "actor: recompute each decoder layer in backward instead of keeping its activations"
    )
    use_remove_padding: bool = doc(
        False, "actor and reference: pack each micro-batch's real tokens into one sequence (no compute on padding)"
    )
    use_fused_kernels: bool = doc(
        False, "actor and reference: log-probs and entropy from the hidden states in chunks, never the logits"
    )
    lora_rank: int = doc(
        0,
        "actor: LoRA adapters of this rank (PEFT) on the target modules, the base frozen; 0 = train the whole "
        "model. The reference policy is then the actor without its adapters (no second copy)",
    )
    lora_alpha: int = doc(16, "LoRA: the adapters' update is scaled by lora_alpha / lora_rank")
    target_modules: Any = doc(
        "all-linear", "LoRA: the linear layers adapted: all-linear (every one but the output head) or a list of names"
    )
    exclude_modules: Any = doc(None, "LoRA: layer names (a list) or a regex never adapted; null = none")
    tiny: TinyModelConfig = section(TinyModelConfig, "the built-in Qwen2-architecture model used when path is null")

    def problems(self, at: str) -> list[str]:
        """LoRA's rank and scale; the tiny model's shape only when it is the model built (``path`` null)."""
        problems = at_least(0, at, " (0 = no LoRA)", lora_rank=self.lora_rank)
        if self.lora_rank > 0 and self.lora_alpha <= 0:
            problems.append(f"{at}.lora_alpha={self.lora_alpha} must be > 0 (the update is scaled by alpha/rank).")
        if self.path is None:
            problems += self.tiny.problems(f"{at}.tiny")
        return problems


@dataclass(frozen=True)
class CriticModelConfig:
    path: str | None = doc(None, "null = start from the actor's model")
    trust_remote_code: bool = doc(False, "allow custom modelling code shipped with the critic's model")
    value_head_init_std: float = doc(0.0, "std of the value head's initial weights (0 = zeros)")
    enable_gradient_checkpointing: bool = doc(
        False, "critic: recompute each decoder layer in backward instead of keeping its activations"
    )
    use_remove_padding: bool = doc(
        False, "critic: pack each micro-batch's real tokens into one sequence (no compute on padding)"
    )
