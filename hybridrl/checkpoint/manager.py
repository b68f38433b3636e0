"""Checkpoints on the driver: where they live, atomic completion, which is latest, how many to keep.

Layout (verl's names): ``<trainer.default_local_dir>/global_step_<k>/`` holding one folder per trainable
role with every rank's shards (``actor/``, ``critic/``), ``rng/`` with every rank's RNG states, and ``trainer_state.json`` (step,
data position, KL controller, driver RNG). ``latest_checkpointed_iteration.txt`` names the newest.
A checkpoint is written under a temporary name and renamed when complete, so a crash mid-write leaves
the previous one as the latest.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

LATEST = "latest_checkpointed_iteration.txt"
STATE = "trainer_state.json"
PREFIX = "global_step_"
ROLE_FOLDERS = {"actor_rollout": "actor"}  # verl's folder names, where hybridrl's role names differ


def role_dir(checkpoint: Path, role: str) -> Path:
    """The folder of ``role``'s shards in a checkpoint, by verl's name (``actor``, ``critic``); a checkpoint
    written before hybridrl took verl's names (``actor_rollout/``) still loads and exports."""
    name = ROLE_FOLDERS.get(role, role)
    if name != role and not (checkpoint / name).exists() and (checkpoint / role).exists():
        return checkpoint / role
    return checkpoint / name


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used; the message names it and what to do."""


class CheckpointManager:
    def __init__(self, root: Path, max_to_keep: int | None) -> None:
        self.root = Path(root)
        self.max_to_keep = max_to_keep
        self.last_committed: Path | None = None  # the newest checkpoint this process wrote

    def begin(self, step: int) -> Path:
        """A fresh temporary directory for step ``step``'s checkpoint."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{PREFIX}{step}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        return tmp

    def commit(self, tmp: Path, step: int, trainer_state: dict[str, Any]) -> Path:
        """Write the driver's state, rename to the final name, then point ``latest`` at it."""
        (tmp / STATE).write_text(json.dumps({"step": step, **trainer_state}, indent=1))
        _fsync_tree(tmp)
        final = self.root / f"{PREFIX}{step}"
        if final.exists():  # a re-run of the same step replaces the old one
            shutil.rmtree(final)
        os.rename(tmp, final)
        pointer = self.root / f".{LATEST}.tmp"
        pointer.write_text(str(step))
        os.replace(pointer, self.root / LATEST)
        self.last_committed = final
        self._prune()
        logger.info("Saved checkpoint %s", final)
        return final

    def abort(self, tmp: Path) -> None:
        shutil.rmtree(tmp, ignore_errors=True)

    def _prune(self) -> None:
        if not self.max_to_keep or self.max_to_keep <= 0:
            return
        for old in self.completed()[: -self.max_to_keep]:
            shutil.rmtree(old, ignore_errors=True)

    def completed(self) -> list[Path]:
        if not self.root.exists():
            return []
        dirs = [p for p in self.root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / STATE).exists()]
        return sorted(dirs, key=lambda p: int(p.name[len(PREFIX) :]))

    def latest(self) -> Path | None:
        pointer = self.root / LATEST
        if pointer.exists():
            candidate = self.root / f"{PREFIX}{pointer.read_text().strip()}"
            if (candidate / STATE).exists():
                return candidate
            logger.warning(
                "%s names %s, which is missing or incomplete; using the newest complete one.", pointer, candidate
            )
        done = self.completed()
        return done[-1] if done else None

    def remove_stale_temporaries(self) -> None:
        """Half-written checkpoints from a crashed run are never used; remove them."""
        if self.root.exists():
            for tmp in self.root.glob(f".tmp-{PREFIX}*"):
                logger.warning("Removing the incomplete checkpoint %s (a previous run stopped mid-write).", tmp)
                shutil.rmtree(tmp, ignore_errors=True)


def resolve_resume(mode: str, resume_from_path: str | None, manager: CheckpointManager) -> Path | None:
    """The checkpoint to resume from: ``auto`` = latest if any, ``disable`` = none, else a path."""
    if mode == "disable":
        return None
    if mode == "auto":
        return manager.latest()
    path = Path(resume_from_path or "" if mode == "resume_path" else mode)
    if mode == "resume_path" and not resume_from_path:
        raise CheckpointError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<checkpoint dir>.")
    if not (path / STATE).exists():
        raise CheckpointError(
            f"Cannot resume from {path}: it is not a complete checkpoint (no {STATE}). Give a "
            f"global_step_<k> directory, or trainer.resume_mode=auto to take the latest under the output dir."
        )
    return path


def read_state(path: Path) -> dict[str, Any]:
    return json.loads((path / STATE).read_text())


def _fsync_tree(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
