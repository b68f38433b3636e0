"""Engine checkpoints, format 2: torch.distributed.checkpoint (DCP) in safetensors, one writer per shard.

Every rank of a group calls ``save_engine`` / ``load_engine`` together. DCP's save planner gives each
chunk of each tensor (an FSDP shard, a tensor-parallel slice, a replicated tensor) to exactly one rank,
so data-parallel replicas (HYBRID_SHARD, NO_SHARD, megatron dp) write it once, not once per replica.
Each safetensors file records its chunks' global offsets, so a load plans its reads for the *current*
layout: a run resumes onto another number of workers or another strategy, and one process can read
the full model (``hybridrl export``). Both engines name parameters with their Hugging Face names.

A role's folder holds DCP's ``shard-*.safetensors`` files (tensors only: ``model.<fqn>`` and
``optim.<fqn>.<state>``; the reader takes every ``*.safetensors`` in the folder, so nothing else of
that suffix may live there) and ``dcp.json`` (the format, and the optimizer's non-tensor
``param_groups``). Format 1 (``rank_<r>.json`` per rank, same layout only) is read by
``hybridrl.checkpoint.shards``.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from hybridrl.checkpoint.shards import (
    assemble_full,
    groups_mismatch,
    jsonable,
    load_engine_shard,
    restore_hyperparameters,
)

logger = logging.getLogger(__name__)

FORMAT = 2
INDEX = "dcp.json"
MODEL = "model."
OPTIM = "optim."
_SHARDED = StateDictOptions(full_state_dict=False)


def checkpoint_format(path: Path) -> int:
    """2 for a DCP folder (``dcp.json``), 1 for per-rank shards (``rank_*.json``); anything else is refused."""
    if (path / INDEX).exists():
        version = json.loads((path / INDEX).read_text()).get("format")
        if version != FORMAT:
            raise ValueError(
                f"{path / INDEX} says format {version!r}; this hybridrl reads formats 1 and {FORMAT}. "
                f"Use the hybridrl version that wrote it, or start over with trainer.resume_mode=disable."
            )
        return FORMAT
    if any(path.glob("rank_*.json")):
        return 1
    raise ValueError(
        f"{path} holds no engine checkpoint hybridrl recognises (neither {INDEX} nor rank_*.json): "
        f"pass a global_step_<k> directory written by hybridrl, or start over with trainer.resume_mode=disable."
    )


def _flatten(model_sd: dict[str, Any], optim_sd: dict[str, Any]) -> dict[str, torch.Tensor]:
    """One flat dict of tensors (plain or DTensor) for DCP: ``model.<fqn>``, ``optim.<fqn>.<state>``."""
    tensors = {f"{MODEL}{k}": v for k, v in model_sd.items()}
    for fqn, state in optim_sd.get("state", {}).items():
        for name, value in state.items():
            if not torch.is_tensor(value):
                raise TypeError(
                    f"Optimizer state {fqn}.{name} is a {type(value).__name__}, not a tensor: "
                    f"checkpoints hold tensor optimizer states only (AdamW's)."
                )
            tensors[f"{OPTIM}{fqn}.{name}"] = value
    return tensors


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def save_engine(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, lr_step: int = 0) -> None:
    """Write the model and optimizer state of every rank of the group into ``path`` (a collective), and the
    learning-rate schedule's step."""
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_SHARDED)
    path.mkdir(parents=True, exist_ok=True)
    dcp.save(_flatten(model_sd, optim_sd), storage_writer=HuggingFaceStorageWriter(str(path), save_distributed=True))
    if _rank() == 0:  # rank 0 coordinates dcp.save: every rank's files are written when it returns here
        param_groups = cast(list[dict[str, Any]], optim_sd["param_groups"])
        groups = [{k: v for k, v in g.items() if k != "params"} for g in param_groups]  # params: this rank's
        index = {"format": FORMAT, "world_size": dist.get_world_size() if dist.is_initialized() else 1}
        (path / INDEX).write_text(json.dumps({**index, "param_groups": jsonable(groups), "lr_step": lr_step}))


def tensor_metadata(path: Path) -> dict[str, TensorStorageMetadata]:
    """Every saved tensor's global size, dtype and chunks; refuses a folder whose chunks do not cover
    their tensors (a lost file)."""
    metadata = HuggingFaceStorageReader(str(path)).read_metadata().state_dict_metadata
    tensors = cast(dict[str, TensorStorageMetadata], metadata)
    for key, meta in tensors.items():
        stored = sum(math.prod(chunk.sizes) for chunk in meta.chunks)
        if stored != math.prod(meta.size):
            raise ValueError(
                f"Checkpoint {path} is incomplete: its files hold {stored} of the {math.prod(meta.size)} "
                f"elements of {key}. Resume from another checkpoint."
            )
    return tensors


def load_engine(model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, rank: int, world_size: int) -> int:
    """Load ``path`` into this rank's model and optimizer (a collective); returns the learning-rate schedule's
    step (0 where the checkpoint predates schedules). Format 2 loads into any layout: each rank reads the
    chunks its current shards cover; format 1 only into the layout that wrote it."""
    if checkpoint_format(path) == 1:
        load_engine_shard(model, optimizer, path, rank, world_size)
        return 0
    index = json.loads((path / INDEX).read_text())
    if rank == 0 and index.get("world_size") != world_size:
        logger.info("Resharding %s: written by %s workers, loaded by %d.", path, index.get("world_size"), world_size)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_SHARDED)
    tensors = _flatten(model_sd, optim_sd)
    groups = cast(list[dict[str, Any]], optim_sd["param_groups"])
    _agree(_mismatch(tensors, _saved_shapes(path), index["param_groups"], len(groups), path))
    dcp.load(tensors, storage_reader=HuggingFaceStorageReader(str(path)))
    restore_hyperparameters(groups, index["param_groups"])
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd, options=_SHARDED)
    return int(index.get("lr_step", 0))


def _saved_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every saved tensor's global shape, read by rank 0 and broadcast (as DCP does with its metadata):
    reading every file's header on every rank would not scale. A refusal reaches every rank."""
    payload: list[Any] = [None]
    if _rank() == 0:
        try:
            payload[0] = {key: tuple(meta.size) for key, meta in tensor_metadata(path).items()}
        except ValueError as exc:
            payload[0] = str(exc)
    if dist.is_initialized():
        dist.broadcast_object_list(payload, src=0)
    if isinstance(payload[0], str):
        raise ValueError(payload[0])
    return cast(dict[str, tuple[int, ...]], payload[0])


def _mismatch(
    tensors: dict[str, torch.Tensor],
    saved: dict[str, tuple[int, ...]],
    saved_groups: list[dict[str, Any]],
    groups: int,
    path: Path,
) -> str | None:
    """What makes ``path`` unfit for this rank's model and optimizer, named before DCP would fail (its
    errors come wrapped per rank). Saved tensors this rank does not hold are fine: a pipeline stage loads
    only its own."""
    missing = sorted(set(tensors) - set(saved))
    if missing:
        return (
            f"Checkpoint {path} lacks {len(missing)} tensors this model needs, e.g. {missing[:3]}: "
            f"it was saved from a different model or optimizer."
        )
    for key, tensor in tensors.items():  # a DTensor's shape is its global shape
        if tuple(tensor.shape) != saved[key]:
            return (
                f"Checkpoint tensor {key} has shape {saved[key]}, this model's {tuple(tensor.shape)}: "
                f"it was saved from a different model."
            )
    why = groups_mismatch(saved_groups, groups)
    return None if why is None else f"Checkpoint {path} does not fit this optimizer: {why}."


def _agree(error: str | None) -> None:
    """Raise on every rank if any rank found ``error``: a rank that went on alone into dcp.load would wait
    in its collectives until the timeout."""
    errors: list[str | None] = [error]
    if dist.is_initialized():
        errors = [None] * dist.get_world_size()
        dist.all_gather_object(errors, error)
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise ValueError(first)


def read_full(path: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    """The full tensors of a format-2 folder whose names start with ``prefix`` (stripped), read in this
    one process without a process group: ``model.`` gives the Hugging Face weights."""
    return _read(path, [key for key in tensor_metadata(path) if key.startswith(prefix)], prefix)


def _read(
    path: Path, keys: list[str], prefix: str, metadata: dict[str, TensorStorageMetadata] | None = None
) -> dict[str, torch.Tensor]:
    metadata = metadata or tensor_metadata(path)
    state = {key: torch.empty(metadata[key].size, dtype=metadata[key].properties.dtype) for key in keys}
    with warnings.catch_warnings():  # DCP warns on every single-process load, which this is on purpose
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, storage_reader=HuggingFaceStorageReader(str(path)), no_dist=True)
    return {key[len(prefix) :]: tensor for key, tensor in state.items()}


def read_full_model(path: Path) -> dict[str, torch.Tensor]:
    """The full model weights (Hugging Face names) of an engine checkpoint of either format."""
    if checkpoint_format(path) == 1:
        return assemble_full(path, prefix="model/")
    return read_full(path, prefix=MODEL)


def iter_full_model(path: Path, batch_bytes: int) -> Iterator[tuple[str, torch.Tensor]]:
    """The full model weights of an engine checkpoint, sorted by name, read a batch of at most
    ``batch_bytes`` at a time (one tensor where it is larger): an export holds a batch, not the model.
    Sorted, an adapted layer's base weight comes before its ``lora_A`` and ``lora_B`` (``lora.merged_weights``).
    Format 1 (per-rank shards, the same layout only) is read whole."""
    if checkpoint_format(path) == 1:
        yield from sorted(assemble_full(path, prefix="model/").items())
        return
    metadata = tensor_metadata(path)
    batch: list[str] = []
    size = 0
    for key in sorted(k for k in metadata if k.startswith(MODEL)):
        nbytes = math.prod(metadata[key].size) * metadata[key].properties.dtype.itemsize
        if batch and size + nbytes > batch_bytes:
            yield from _read(path, batch, MODEL, metadata).items()  # in the batch's (sorted) order
            batch, size = [], 0
        batch.append(key)
        size += nbytes
    if batch:
        yield from _read(path, batch, MODEL, metadata).items()
