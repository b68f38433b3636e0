"""Learning-rate warm-up and schedules with verl's keys and meaning: one scheduler step per training step.

Written as a pure function of the step instead of a ``torch.optim.lr_scheduler.LambdaLR``: the scheduler's
saved state carries the base learning rate of the run that saved it, while here the config's ``optim.lr``
stays the base on resume and only the step count is checkpointed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridrl.config.schema import OptimConfig


@dataclass(frozen=True)
class LRSchedule:
    kind: str  # constant | cosine
    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5

    @classmethod
    def from_config(cls, optim: OptimConfig, total_steps: int) -> LRSchedule:
        """``optim.total_training_steps`` (when > 0) or the run's ``total_steps``; warm-up from
        ``lr_warmup_steps`` (when > 0) or ``lr_warmup_steps_ratio`` of the total, as verl does."""
        total = optim.total_training_steps if optim.total_training_steps > 0 else total_steps
        warmup = optim.lr_warmup_steps if optim.lr_warmup_steps > 0 else int(optim.lr_warmup_steps_ratio * total)
        kind = str(optim.warmup_style or optim.lr_scheduler_type)  # warmup_style: verl's older name
        return cls(kind, warmup, total, optim.min_lr_ratio, optim.num_cycles)

    def factor(self, step: int) -> float:
        """The multiple of the base learning rate for training step ``step`` (0 = the first update)."""
        if step < self.warmup_steps:
            return step / max(1, self.warmup_steps)  # linear from 0, as verl's warm-up
        if self.kind == "constant":
            return 1.0
        progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * self.num_cycles * progress))
        return max(self.min_lr_ratio, self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine)
