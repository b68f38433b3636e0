"""A Hugging Face weights directory written by every rank of a group, none holding the whole model.

``save_pretrained`` takes the whole state dict in one process: at 70B in fp32 that is 280 GB on one host,
after days of training. Here the full tensors stream past every rank one at a time (a collective, as in
the hand-over), each is given to the rank that has been given the fewest bytes so far (the same choice on
every rank, as every rank sees the same names and sizes in the same order), and a rank keeps only its own
until they fill a file of ``max_shard_bytes``. A rank so holds at most its pending file plus
safetensors' serialised copy of it, and the tensor in flight. The files are then named as
``save_pretrained`` names them (``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` with
``model.safetensors.index.json``), and load with ``from_pretrained``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from hybridrl.config.schema import TrainerConfig

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_PART = ".part-"  # a rank's file before every rank has written its own (then renamed)
DEFAULT_SHARD_BYTES = TrainerConfig.hf_max_shard_mb * 2**20


class ShardedWeightsWriter:
    """Every rank of the group calls ``add`` with the same tensors in the same order, then ``finish``."""

    def __init__(self, out_dir: Path, rank: int, world_size: int, max_shard_bytes: int) -> None:
        if max_shard_bytes <= 0:
            raise ValueError(f"max_shard_bytes={max_shard_bytes} must be positive")
        self.out_dir, self.rank, self.world_size = out_dir, rank, world_size
        self.max_shard_bytes = max_shard_bytes
        self.given = [0] * world_size  # bytes given to each rank so far: equal on every rank
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = 0
        self.files: list[tuple[str, list[str], int]] = []  # (part file, tensor names, bytes), written
        out_dir.mkdir(parents=True, exist_ok=True)

    def add(self, name: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        owner = min(range(self.world_size), key=lambda r: (self.given[r], r))
        self.given[owner] += nbytes
        if owner != self.rank:
            return
        if self.pending and self.pending_bytes + nbytes > self.max_shard_bytes:
            self._flush()
        self.pending[name] = tensor.detach().to("cpu").contiguous()
        self.pending_bytes += nbytes

    def _flush(self) -> None:
        part = f"{_PART}r{self.rank:05d}-{len(self.files):05d}.safetensors"
        save_file(self.pending, str(self.out_dir / part), metadata={"format": "pt"})  # as save_pretrained's
        self.files.append((part, list(self.pending), self.pending_bytes))
        self.pending, self.pending_bytes = {}, 0

    def abort(self) -> None:
        """Remove this rank's files (the export failed before its end)."""
        for part, _, _ in self.files:
            (self.out_dir / part).unlink(missing_ok=True)
        self.files, self.pending, self.pending_bytes = [], {}, 0

    def finish(self) -> None:
        """Write what is pending, then give every file its final name; rank 0 writes the index."""
        if self.pending:
            self._flush()
        everyone: list[list[tuple[str, list[str], int]]] = [self.files]
        if self.world_size > 1:
            everyone = [[] for _ in range(self.world_size)]
            dist.all_gather_object(everyone, self.files)  # also: every rank has written its parts
        if self.rank == 0:
            _remove_stale_weights(self.out_dir)
        if self.world_size > 1:
            dist.barrier()  # no rank renames into the directory before the stale files are gone
        ordered = [entry for files in everyone for entry in files]
        names = _final_names(len(ordered))
        first = sum(len(files) for files in everyone[: self.rank])
        for k, (part, _, _) in enumerate(self.files):
            os.replace(self.out_dir / part, self.out_dir / names[first + k])
        if self.rank == 0 and len(ordered) > 1:
            weight_map = {name: names[i] for i, (_, tensors, _) in enumerate(ordered) for name in tensors}
            index = {
                "metadata": {"total_size": sum(nbytes for _, _, nbytes in ordered)},
                "weight_map": dict(sorted(weight_map.items())),
            }
            (self.out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _final_names(count: int) -> list[str]:
    if count == 1:
        return [SINGLE_FILE]
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def _remove_stale_weights(out_dir: Path) -> None:
    """An earlier export's weights in the same directory (another layout, another file count) would be read
    with the new ones by a loader that takes every ``*.safetensors`` file."""
    for path in out_dir.iterdir():
        if path.name == INDEX_FILE or (path.name.startswith("model") and path.suffix == ".safetensors"):
            path.unlink()


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a Hugging Face weights directory, whether one file or several with an index."""
    index = directory / INDEX_FILE
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [SINGLE_FILE]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(directory / name)))
    return state
