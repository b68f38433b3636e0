"""The run's checkpoints as seen from the training loop: which steps save, what a failed write tells the
user, and the save after a step that failed before its update (so the run resumes from the step before).
The loop supplies the driver's state; where and how shards are written is ``hybridrl.checkpoint``'s."""

from __future__ import annotations

import logging
from typing import Any

from hybridrl.checkpoint.manager import CheckpointError, CheckpointManager
from hybridrl.cluster.errors import WorkerCallError
from hybridrl.cluster.worker_group import WorkerGroup
from hybridrl.config.schema import TrainerConfig

logger = logging.getLogger(__name__)


class Checkpointing:
    def __init__(
        self, manager: CheckpointManager, groups: list[WorkerGroup], trainer: TrainerConfig, last_saved: int = 0
    ) -> None:
        """``last_saved``: the step this leg starts from (resumed), already on disk."""
        self.manager = manager
        self.groups = groups
        self.save_freq = trainer.save_freq
        self.total_steps = trainer.total_steps
        self.last_saved = last_saved  # the newest step saved (or resumed from) in this leg

    def due(self, step: int) -> bool:
        """Every ``save_freq`` steps and at the last one."""
        return self.save_freq > 0 and (step == self.total_steps or step % self.save_freq == 0)

    def save(self, step: int, state: dict[str, Any]) -> None:
        """Every group's shards plus the driver's ``state`` as step ``step``; a failed write leaves the
        previous checkpoint the latest and says so."""
        try:
            tmp = self.manager.begin(step)
        except OSError as exc:
            raise self._write_failed(step, exc) from exc
        try:
            for group in self.groups:
                group.save_checkpoint(str(tmp))
            self.manager.commit(tmp, step, state)
            self.last_saved = step
        except BaseException as exc:
            self.manager.abort(tmp)  # the previous checkpoint stays the latest
            if isinstance(exc, OSError) or (isinstance(exc, WorkerCallError) and not exc.system):
                raise self._write_failed(step, exc) from exc
            raise

    def save_before_failure(self, step: int, state_before: dict[str, Any]) -> None:
        """Step ``step`` failed before any update (e.g. a reward function raised): the workers still hold the
        weights of step - 1, so checkpoint them with the driver's ``state_before`` unless already saved."""
        if step - 1 <= self.last_saved:
            return
        try:
            self.save(step - 1, state_before)
            logger.error("Step %d failed before updating; saved step %d so the run can resume from it.", step, step - 1)
        except Exception as exc:  # the original failure is what the user must see
            logger.error("Could not save a checkpoint after the failure: %s", exc)

    def _write_failed(self, step: int, exc: BaseException) -> CheckpointError:
        """A disk that is full, read-only or gone: say where, and what the run can resume from."""
        kept = self.manager.latest()
        return CheckpointError(
            f"Writing the step {step} checkpoint under {self.manager.root} failed ({exc}); free space or fix "
            f"the permissions there. "
            + (
                f"The latest complete checkpoint, {kept}, is intact: rerun the same command to resume from it."
                if kept is not None
                else "There is no earlier checkpoint: the run starts over when rerun."
            )
        )
