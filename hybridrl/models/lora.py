"""LoRA adapters on a causal LM, built with PEFT: the trained policy is the frozen base plus ``scale * B @ A``
per adapted linear layer.

Why LoRA matters for RL on big models: the optimizer holds state for the adapters only (AdamW's 8 bytes per
trained parameter: 560 GB for a 70B model, ~1.7 GB for rank-16 adapters on every linear layer), the frozen
base needs no gradients, and the reference policy is the same base with the adapters switched off
(``adapters_disabled``), so no second copy of the weights is built for the KL term.

PEFT's ``inject_adapter_in_model`` adapts the module tree in place (no ``PeftModel`` wrapper), so the
parallel strategies shard it like any model. Names change in one way: an adapted layer keeps its weight as
``<layer>.base_layer.weight`` beside ``<layer>.lora_A.default.weight`` and ``<layer>.lora_B.default.weight``.
``hybridrl.models.weights.base_name`` maps the first back to the checkpoint's name; ``merged_weights`` turns a stream of the
adapted model's tensors into the plain model's (what the generation engines and exports hold).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hybridrl.models.weights import WeightSource

if TYPE_CHECKING:
    from peft import LoraConfig

#: The one adapter a model carries (PEFT's default name).
ADAPTER = "default"
_BASE = ".base_layer."
_LORA_A = f".lora_A.{ADAPTER}."
_LORA_B = f".lora_B.{ADAPTER}."


@dataclass(frozen=True)
class LoraSpec:
    """verl's keys (``actor_rollout_ref.model.lora_rank`` ...): rank, alpha, which linear layers."""

    rank: int
    alpha: int
    target_modules: str | tuple[str, ...] = "all-linear"
    exclude_modules: str | tuple[str, ...] | None = None

    @classmethod
    def from_keys(cls, rank: int, alpha: int, target_modules: Any, exclude_modules: Any) -> LoraSpec | None:
        """None where ``rank`` is 0 (LoRA off); lists from the config become tuples."""
        if rank <= 0:
            return None

        def names(value: Any) -> str | tuple[str, ...] | None:
            return value if value is None or isinstance(value, str) else tuple(str(v) for v in value)

        return cls(rank, int(alpha), names(target_modules) or "all-linear", names(exclude_modules))

    def peft_config(self) -> LoraConfig:
        from peft import LoraConfig  # noqa: PLC0415 - see _lora_layers

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        exclude = self.exclude_modules
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            target_modules=targets,
            exclude_modules=list(exclude) if isinstance(exclude, tuple) else exclude,
            lora_dropout=0.0,
            bias="none",
        )


def add_adapters(model: nn.Module, spec: LoraSpec) -> list[str]:
    """Adapt ``model`` in place (it may be empty: meta parameters); only the adapters stay trainable.
    Returns the adapted layers' names; refuses a spec that adapts nothing."""
    from peft import inject_adapter_in_model  # noqa: PLC0415 - see _lora_layers

    why = None
    try:
        inject_adapter_in_model(spec.peft_config(), model, adapter_name=ADAPTER)
    except ValueError as exc:  # PEFT's "Target modules ... not found"
        why = str(exc).splitlines()[0]
    adapted = [name for name, _ in _lora_layers(model)]
    if not adapted:
        raise ValueError(
            f"LoRA: target_modules={spec.target_modules!r} matches no linear layer of {type(model).__name__}"
            f"{f' ({why})' if why else ''}; set actor_rollout_ref.model.target_modules to all-linear or to layer "
            f"names such as [q_proj, v_proj]."
        )
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name))
    return adapted


def with_adapters(model: nn.Module, spec: LoraSpec, source: WeightSource, seed: int) -> WeightSource:
    """Adapt the empty ``model`` (``add_adapters``); its weights come from ``source``, the adapters (in no
    file) from ``initial_adapters``."""
    add_adapters(model, spec)
    before = source.initial

    def initial() -> dict[str, torch.Tensor]:
        return {**(before() if before is not None else {}), **initial_adapters(model, seed)}

    return dataclasses.replace(source, initial=initial)


def initial_adapters(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """The adapters' full initial values, the same on every rank: ``A`` as PEFT initialises it (an
    ``nn.Linear``'s Kaiming-uniform), ``B`` zero, so training starts from the base model exactly. Computed
    whole and seeded (not in place on each shard), so any layout starts from the same adapters."""
    generator = torch.Generator().manual_seed(seed)
    values: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        if _LORA_A in name:
            fan_in = param.shape[1]
            bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) as nn.Linear and PEFT use it
            values[name] = (torch.rand(tuple(param.shape), generator=generator) * 2 - 1) * bound
        elif _LORA_B in name:
            values[name] = torch.zeros(tuple(param.shape))
    return values


def is_adapter(name: str) -> bool:
    return _LORA_A in name or _LORA_B in name


def merge_input(name: str) -> bool:
    """Whether ``merged_weights`` needs the tensor at full precision: an adapted weight or its ``A``/``B``."""
    return is_adapter(name) or name.endswith(f"{_BASE}weight")


def scalings(model: nn.Module) -> dict[str, float]:
    """``{adapted layer name: alpha / rank}``, read from the layers themselves."""
    return {name: float(m.scaling[ADAPTER]) for name, m in _lora_layers(model)}


def _lora_layers(model: nn.Module) -> list[tuple[str, Any]]:
    """The adapted layers of ``model``. PEFT is imported by what adds adapters (``add_adapters``) and nowhere
    at module level: without it imported no layer can be PEFT's, and the workers of runs without LoRA skip its
    import (~0.3 CPU-seconds at every worker's start, dozens of starts in a test session)."""
    module = sys.modules.get("peft.tuners.lora")
    if module is None:
        return []
    return [(name, m) for name, m in model.named_modules() if isinstance(m, module.LoraLayer)]


def merged_weights(
    items: Iterable[tuple[str, torch.Tensor]], scaling: dict[str, float], dtype: torch.dtype | None = None
) -> Iterator[tuple[str, torch.Tensor]]:
    """The plain model's ``(name, tensor)`` stream from the adapted model's, in its order (a layer's base
    weight comes before its ``A`` and ``B``): each adapted weight as ``W + scale * B @ A``, merged in fp32
    and then cast to ``dtype`` (a merge in bf16 would round the small update away). Holds at most one
    layer's base weight and ``A`` while it waits for its ``B``."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in items:
        if _LORA_A in name:
            pending.setdefault(name.split(_LORA_A)[0], {})["A"] = tensor
            continue
        if _LORA_B in name:
            layer = name.split(_LORA_B)[0]
            parts = pending.pop(layer)
            weight, down = parts["W"], parts["A"]
            merged = weight.float() + scaling[layer] * (tensor.float() @ down.float())
            yield f"{layer}.weight", merged.to(dtype or weight.dtype)
            continue
        out = tensor if dtype is None or not tensor.is_floating_point() else tensor.to(dtype)
        if _BASE in name:
            layer, leaf = name.split(_BASE)
            if leaf == "weight":
                pending.setdefault(layer, {})["W"] = tensor
                continue
            yield f"{layer}.{leaf}", out
            continue
        yield name, out
    if pending:
        raise RuntimeError(f"LoRA merge: layers {sorted(pending)[:3]} had no lora_B in the stream.")


@contextlib.contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """The base model for the duration (the reference policy): every adapted layer computes ``W x`` only."""
    layers = [m for _, m in _lora_layers(model)]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)


ADAPTER_CONFIG = "adapter_config.json"


def save_adapter_config(model: nn.Module, spec: LoraSpec, directory: str) -> None:
    """PEFT's ``adapter_config.json`` beside a checkpoint's model config: what an export needs to merge the
    adapters (alpha / rank) or to publish them as a PEFT adapter."""
    config = spec.peft_config()
    config.target_modules = sorted({name.split(".")[-1] for name in scalings(model)})
    config.base_model_name_or_path = None
    config.save_pretrained(directory)


def read_adapter_config(directory: Path) -> LoraConfig | None:
    """The adapters' config saved with a checkpoint, or None (no LoRA)."""
    if not (directory / ADAPTER_CONFIG).exists():
        return None
    from peft import LoraConfig  # noqa: PLC0415 - see _lora_layers

    return LoraConfig.from_pretrained(str(directory))


def uniform_scalings(config: LoraConfig) -> dict[str, float]:
    """Every adapted layer's scale as a checkpoint's adapter config gives it (``lora_alpha / r``), for
    ``merged_weights`` over a stream whose layers are not known in advance."""
    scale = float(config.lora_alpha) / float(config.r)
    return collections.defaultdict(lambda: scale)


def peft_adapter_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapters of a checkpoint's state under the names PEFT saves (``base_model.model.<layer>.lora_A.weight``),
    loadable with ``PeftModel.from_pretrained(base, directory)``."""
    return {
        f"base_model.model.{name.replace(f'.{ADAPTER}.', '.')}": tensor.contiguous()
        for name, tensor in state.items()
        if is_adapter(name)
    }
