"""Checkpoint format 1 (per-rank shards in safetensors + JSON, never pickle), and RNG states.

Format 1: each rank wrote the tensors it held (its DTensor local shards, plain tensors as they are) and a
JSON index with each tensor's global shape and placements on the device mesh, every replica its own copy.
Such checkpoints still load into the layout that wrote them, and export reassembles full tensors from the
placements without a distributed job. New checkpoints are format 2 (``hybridrl.checkpoint.dcp_io``); the
writer stays for tests that build format-1 checkpoints.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

FORMAT_VERSION = 1


def _placements(tensor: Any) -> dict[str, Any]:
    if hasattr(tensor, "placements"):  # DTensor
        specs = []
        for p in tensor.placements:
            specs.append(f"S{p.dim}" if p.is_shard() else "R" if p.is_replicate() else str(p))
        mesh = tensor.device_mesh
        return {
            "global_shape": list(tensor.shape),
            "placements": specs,
            "mesh_shape": list(mesh.shape),
            "coords": list(mesh.get_coordinate() or []),
        }
    return {"global_shape": list(tensor.shape), "placements": [], "mesh_shape": [], "coords": []}


def _local(tensor: Any) -> torch.Tensor:
    return (tensor.to_local() if hasattr(tensor, "to_local") else tensor).detach().to("cpu").contiguous()


def _flatten(model_sd: dict, optim_sd: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    tensors = {f"model/{k}": v for k, v in model_sd.items()}
    for fqn, state in optim_sd.get("state", {}).items():
        for name, value in state.items():
            tensors[f"optim/{fqn}/{name}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return tensors, {"param_groups": optim_sd.get("param_groups", [])}


def save_engine_shard(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, rank: int, world_size: int
) -> None:
    """Write ``path/rank_{rank}.safetensors`` and ``.json``: this rank's model and optimizer shards."""
    model_sd, optim_sd = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=False))
    tensors, extra = _flatten(model_sd, optim_sd)
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: _local(v) for k, v in tensors.items()}, str(path / f"rank_{rank}.safetensors"))
    index = {
        "format": FORMAT_VERSION,
        "rank": rank,
        "world_size": world_size,
        "tensors": {k: _placements(v) for k, v in tensors.items()},
        **jsonable(extra),
    }
    (path / f"rank_{rank}.json").write_text(json.dumps(index))


def load_engine_shard(
    model: nn.Module, optimizer: torch.optim.Optimizer, path: Path, rank: int, world_size: int
) -> None:
    """Copy this rank's shards back into the model and optimizer (same layout as when saved)."""
    index_path = path / f"rank_{rank}.json"
    if not index_path.exists():
        raise FileNotFoundError(
            f"Checkpoint shard {index_path} is missing: the checkpoint is incomplete or "
            f"was written by a run with fewer workers."
        )
    index = json.loads(index_path.read_text())
    if index["world_size"] != world_size:
        raise ValueError(
            f"Checkpoint {path} was written by {index['world_size']} workers; this run has {world_size}. "
            f"Resume with the same pool size, or export it (hybridrl export) and start from the export."
        )
    saved = load_file(str(path / f"rank_{rank}.safetensors"))
    options = StateDictOptions(full_state_dict=False)
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    template, _ = _flatten(model_sd, optim_sd)
    missing = sorted(set(template) - set(saved))
    if missing:
        raise ValueError(
            f"Checkpoint {path} lacks {len(missing)} tensors this model needs, e.g. {missing[:3]}: "
            f"it was saved from a different model or optimizer."
        )
    for key, target in template.items():
        local = target.to_local() if hasattr(target, "to_local") else target
        if tuple(local.shape) != tuple(saved[key].shape):
            raise ValueError(
                f"Checkpoint tensor {key} has shape {tuple(saved[key].shape)}, the model's shard "
                f"{tuple(local.shape)}: different model or layout."
            )
        with torch.no_grad():
            local.copy_(saved[key].to(local.device, local.dtype))
    restore_hyperparameters(cast(list[dict[str, Any]], optim_sd["param_groups"]), index["param_groups"])
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd, options=options)


# How the optimizer runs, not what it learned: the loading layout's own choice (engine/base.py), which a
# checkpoint of another layout must not override (multi-tensor kernels cannot mix DTensors with tensors).
KERNEL_CHOICES = frozenset({"foreach", "fused", "capturable", "differentiable"})


def settings(group: dict[str, Any]) -> dict[str, Any]:
    """What a parameter group holds beyond its parameters and the layout's kernel choices (JSON-comparable)."""
    return {key: jsonable(value) for key, value in group.items() if key != "params" and key not in KERNEL_CHOICES}


def groups_mismatch(saved: list[dict[str, Any]], groups: int) -> str | None:
    """Why ``saved`` param groups cannot restore into ``groups`` of them, or None. A layout may split its
    parameters into another number of groups (Megatron: one per tensor type, ``engine.base.optimizer_groups``);
    that restores where every saved group has the same settings, as hybridrl's do."""
    if len(saved) == groups or (saved and all(settings(g) == settings(saved[0]) for g in saved)):
        return None
    return f"it has {len(saved)} optimizer parameter groups with different settings, this optimizer {groups}"


def restore_hyperparameters(groups: list[dict[str, Any]], saved: list[dict[str, Any]]) -> None:
    """The saved learning rates, betas, step counts, ... into the loading optimizer's param groups (JSON lists
    back to tuples where the group holds one); its parameters and kernel choices stay its own. Saved groups
    of another count restore where they agree (``groups_mismatch``): their one setting goes to every group."""
    why = groups_mismatch(saved, len(groups))
    if why is not None:
        raise ValueError(f"Checkpoint optimizer state does not fit: {why}; resume with the layout that wrote it.")
    if len(saved) != len(groups):
        saved = [saved[0]] * len(groups)
    for group, saved_group in zip(groups, saved):
        for key, value in settings(saved_group).items():
            group[key] = tuple(value) if isinstance(group.get(key), tuple) else value


def assemble_full(path: Path, prefix: str = "model/") -> dict[str, torch.Tensor]:
    """Full tensors under ``prefix`` from every rank's shard, using the saved placements."""
    indexes = sorted(path.glob("rank_*.json"), key=lambda p: int(p.stem.split("_")[1]))
    if not indexes:
        raise FileNotFoundError(f"No checkpoint shards (rank_*.json) in {path}.")
    pieces: dict[str, dict[tuple[int, ...], torch.Tensor]] = {}
    meta: dict[str, dict[str, Any]] = {}
    for index_path in indexes:
        index = json.loads(index_path.read_text())
        tensors = load_file(str(index_path.with_suffix(".safetensors")))
        for key, info in index["tensors"].items():
            if key.startswith(prefix):
                pieces.setdefault(key, {})[tuple(info["coords"])] = tensors[key]
                meta[key] = info
    return {key[len(prefix) :]: _assemble(pieces[key], meta[key]) for key in pieces}


def _assemble(pieces: dict[tuple[int, ...], torch.Tensor], info: dict[str, Any]) -> torch.Tensor:
    if not info["placements"]:
        return next(iter(pieces.values()))
    # Walk mesh dimensions from the last: concatenate shards along their tensor dim, keep replica 0.
    current = dict(pieces)
    for mesh_dim in reversed(range(len(info["mesh_shape"]))):
        spec = info["placements"][mesh_dim]
        merged: dict[tuple[int, ...], torch.Tensor] = {}
        groups: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = {}
        for coords, tensor in current.items():
            rest = coords[:mesh_dim] + coords[mesh_dim + 1 :]
            groups.setdefault(rest, []).append((coords[mesh_dim], tensor))
        for rest, items in groups.items():
            items.sort(key=lambda item: item[0])
            if spec.startswith("S"):
                merged[rest] = torch.cat([t for _, t in items], dim=int(spec[1:]))
            else:
                merged[rest] = items[0][1]
        current = merged
    full = next(iter(current.values()))
    if list(full.shape) != info["global_shape"]:
        raise ValueError(f"Reassembled shape {list(full.shape)} != saved global shape {info['global_shape']}.")
    return full


def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """Python, NumPy and torch RNG states as JSON + tensors."""
    version, state, gauss = random.getstate()
    np_state = cast(tuple[Any, ...], np.random.get_state())
    meta = {
        "python": [version, list(state), gauss],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        tensors["torch_cuda"] = torch.cuda.get_rng_state()
    return meta, tensors


def set_rng_state(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    version, state, gauss = meta["python"]
    random.setstate((version, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    if "torch_cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["torch_cuda"])


def save_rng(path: Path, name: str) -> None:
    meta, tensors = rng_state()
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{name}.json").write_text(json.dumps(meta))
    save_file(tensors, str(path / f"{name}.safetensors"))


def load_rng(path: Path, name: str) -> bool:
    """Restore the RNG states saved under ``name``; False, changing nothing, when there are none (a
    checkpoint written by fewer workers than this run has)."""
    meta = path / f"{name}.json"
    if not meta.exists():
        return False
    set_rng_state(json.loads(meta.read_text()), load_file(str(path / f"{name}.safetensors")))
    return True


def jsonable(value: Any) -> Any:
    """``value`` with tensors as numbers or lists and tuples as lists, for ``json.dumps``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if torch.is_tensor(value):
        return value.item() if value.numel() == 1 else value.tolist()
    return value
