"""TensorBoard backend (``trainer.logger`` containing ``tensorboard``): every numeric metric as a scalar.

Event files go to ``<output_dir>/tensorboard``; view them with ``tensorboard --logdir <output_dir>``.
Metric names keep their ``group/name`` shape, which TensorBoard uses to group the charts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from hybridrl.observability.tracking.breakdown import as_number


class TensorBoardTracker:
    def __init__(self, log_dir: Path | str) -> None:
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """One scalar per numeric metric at ``step``; strings, lists and nulls are left out."""
        for key, value in metrics.items():
            number = as_number(value)
            if number is not None:
                self._writer.add_scalar(key, number, global_step=step)

    def close(self) -> None:
        """Flush so the last steps are on disk even if the process dies right after."""
        self._writer.flush()
        self._writer.close()
