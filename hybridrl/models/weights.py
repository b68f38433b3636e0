"""Models built without their weights, then filled shard by shard from the safetensors files.

A 70B model in fp32 is 280 GB: no rank may build it whole. Roles build the module tree with every
parameter on the meta device (no memory), the parallel strategy shards it (FSDP2, tensor parallel,
pipeline stages), ``materialize`` allocates only this rank's shards, and ``load_weights`` reads only the
slices of the safetensors files those shards cover (torch.distributed.checkpoint's Hugging Face reader
reads each request with ``safe_open(...).get_slice``, so a rank touches its own bytes of the file).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors import safe_open
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.tensor import DTensor, distribute_tensor

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device and keep real buffers.

    ``with torch.device("meta")`` would put buffers there too, and non-persistent buffers (rotary
    frequencies) are in no checkpoint: they must be computed at construction. accelerate's
    ``init_empty_weights(include_buffers=False)`` does this; it is not a dependency of ours, so the same
    few lines live here. Parameters already on meta (a tied weight assigned again) are kept as they are,
    which keeps ties."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def materialize(model: nn.Module, device: torch.device) -> nn.Module:
    """Allocate ``model``'s (sharded) parameters on ``device``, uninitialised, keeping buffer values and
    tied weights (``to_empty`` gives each module its own new tensor)."""
    buffers = {name: buf.detach().clone() for name, buf in model.named_buffers()}
    first: dict[int, tuple[nn.Module, str]] = {}
    ties: list[tuple[nn.Module, str, nn.Module, str]] = []
    for module in model.modules():
        for name, param in module._parameters.items():
            if param is not None:
                first_module, first_name = first.setdefault(id(param), (module, name))
                if (first_module, first_name) != (module, name):
                    ties.append((module, name, first_module, first_name))
    model.to_empty(device=device)
    for module, name, first_module, first_name in ties:
        module._parameters[name] = first_module._parameters[first_name]
    with torch.no_grad():
        for name, buf in model.named_buffers():
            buf.copy_(buffers[name])
    return model


def tied_aliases(state: dict[str, Any]) -> dict[str, str]:
    """``{alias: first name}`` for entries of a ``state_dict(keep_vars=True)`` that are the same tensor as
    an earlier one (tied weights): read, sent and gathered once, under the first name."""
    first: dict[int, str] = {}
    return {name: first[id(t)] for name, t in state.items() if first.setdefault(id(t), name) != name}


@dataclass(frozen=True)
class WeightSource:
    """Where an empty model's weights come from.

    ``prefixes``: (model prefix, file prefix) pairs tried in order to find a parameter in the files
    (a critic's ``backbone.x`` is a causal LM's ``model.x``). ``initial``: full initial values for the
    weights the files lack (a value head, a classification head), seeded so every rank agrees."""

    path: str
    prefixes: tuple[tuple[str, str], ...] = (("", ""),)
    initial: Callable[[], dict[str, torch.Tensor]] | None = field(default=None, compare=False)


def safetensors_keys(path: str) -> set[str]:
    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"Model directory '{path}' has no *.safetensors weights; save it with "
            f"`model.save_pretrained(dir)` (safetensors is transformers' default) or convert its .bin files."
        )
    keys: set[str] = set()
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    return keys


def base_name(name: str) -> str:
    """The checkpoint's name of a parameter of a LoRA-adapted layer (``hybridrl.models.lora``): PEFT keeps
    the layer's own weight as ``<layer>.base_layer.weight``."""
    return name.replace(".base_layer.", ".")


def _file_key(name: str, source: WeightSource, available: set[str]) -> str | None:
    name = base_name(name)  # a LoRA-adapted layer's weight is the checkpoint's weight of that layer
    for model_prefix, file_prefix in source.prefixes:
        if name.startswith(model_prefix):
            candidate = file_prefix + name[len(model_prefix) :]
            if candidate in available:
                return candidate
    return None


def load_weights(model: nn.Module, source: WeightSource) -> None:
    """Fill ``model``'s local shards from ``source``; every rank of the model's group calls this together.

    Tied weights (one tensor under two names) are read once. Weights in no file get ``source.initial``'s
    values, sliced to this rank's shard; any other weight missing is an error naming it."""
    available = safetensors_keys(source.path)
    targets: dict[str, Any] = {}
    unresolved: list[str] = []
    state = model.state_dict(keep_vars=True)
    aliases = tied_aliases(state)
    for name, tensor in state.items():
        if name in aliases or not isinstance(tensor, nn.Parameter):
            continue  # a tied weight is filled through its first name; buffers keep their computed values
        key = _file_key(name, source, available)
        if key is None:
            unresolved.append(name)
        else:
            targets[key] = tensor.detach()
    with warnings.catch_warnings():
        # A single process (tests, tools) reads everything itself; DCP warns that it assumes so.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(
            targets,
            storage_reader=HuggingFaceStorageReader(source.path),
            planner=DefaultLoadPlanner(allow_partial_load=True),
            no_dist=not dist.is_initialized(),
        )
    if unresolved:
        initial = source.initial() if source.initial is not None else {}
        missing = [name for name in unresolved if name not in initial]
        if missing:
            raise ValueError(
                f"Model directory '{source.path}' lacks weights {missing[:4]}"
                f"{' ...' if len(missing) > 4 else ''}: it is not a checkpoint of this architecture."
            )
        params = dict(model.named_parameters())
        with torch.no_grad():
            for name in unresolved:
                _copy_full(params[name], initial[name])


def _copy_full(target: torch.Tensor, full: torch.Tensor) -> None:
    """Copy a full tensor into ``target``, which may be a shard (DTensor) of it."""
    if isinstance(target, DTensor):
        # src_data_rank=None: every rank holds the same full value and keeps its own slice (no traffic).
        local = distribute_tensor(full.to(target.dtype), target.device_mesh, target.placements, src_data_rank=None)
        target.to_local().copy_(local.to_local())
    else:
        target.copy_(full)
