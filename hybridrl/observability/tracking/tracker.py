"""Where metrics go: metrics.jsonl (always: the run record that ``report`` and resume read), the console
(progress bar + verl's per-step line), tensorboard, wandb and mlflow."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from tqdm import tqdm

from hybridrl.config.loader import to_dict
from hybridrl.config.schema import Config
from hybridrl.observability.tracking.optional import MissingTrackerError, MlflowTracker, WandbTracker

logger = logging.getLogger("hybridrl.train")

# Phases shown on the console line, in step order: (metric, short label).
CONSOLE_PHASES = [
    ("timing_s/gen", "gen"),
    ("timing_s/reward", "reward"),
    ("timing_s/old_log_prob", "old_lp"),
    ("timing_s/ref", "ref"),
    ("timing_s/values", "values"),
    ("timing_s/adv", "adv"),
    ("timing_s/update_critic", "critic"),
    ("timing_s/update_actor", "actor"),
    ("timing_s/validation", "val"),
    ("timing_s/checkpoint", "ckpt"),
]


class JsonlTracker:
    def __init__(self, path: Path, resume_step: int | None = None) -> None:
        """A fresh file, or on resume the rows up to ``resume_step`` kept and new rows appended."""
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        kept = read_rows(path, resume_step) if resume_step is not None else []
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open for the tracker's life, closed by close()
        for row in kept:
            self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()  # a crash loses at most the step in flight

    def close(self) -> None:
        self._file.close()


class ConsoleTracker:
    def __init__(self, total_steps: int, progress_bar: bool) -> None:
        self.bar = None
        if progress_bar:
            self.bar = tqdm(total=total_steps, desc="PPO", unit="step", dynamic_ncols=True, leave=True)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        val = " ".join(f"{k.split('/', 1)[1]} {v:.3f}" for k, v in sorted(metrics.items()) if k.startswith("val-core/"))
        if "timing_s/step" not in metrics:  # a validation-only row (val_before_train)
            logger.info("validation at step %d | %s", step, val)
            return
        score = metrics.get("critic/score/mean", float("nan"))
        length = metrics.get("response_length/mean", float("nan"))
        phases = " ".join(f"{label} {metrics[key]:.2f}s" for key, label in CONSOLE_PHASES if key in metrics)
        summary = (
            f"step {step} | score {score:.3f} | resp_len {length:.1f} | {phases} | "
            f"step {metrics.get('timing_s/step', float('nan')):.2f}s" + (f" | val {val}" if val else "")
        )
        # verl's line (every metric) first, for verl users' eyes and log parsers; then the short summary.
        if self.bar is not None:
            self.bar.set_postfix(score=f"{score:.3f}", len=f"{length:.1f}")
            self.bar.update(1)
            self.bar.write(verl_line(metrics, step))
            self.bar.write(summary)
        else:
            logger.info("%s", verl_line(metrics, step))
            logger.info(summary)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def verl_line(metrics: dict[str, Any], step: int) -> str:
    """verl's console line: ``step:N - key:value - ...``, every metric, numbers to three decimals."""
    parts = [f"{k}:{v:.3f}" if isinstance(v, float) else f"{k}:{v}" for k, v in metrics.items()]
    return f"step:{step} - " + " - ".join(parts)


class Tracker:
    """Every selected backend; wandb and mlflow are imported only when selected."""

    def __init__(self, backends: list[str], output_dir: Path, cfg: Config, resume_step: int | None = None) -> None:
        self.backends: list[Any] = []
        trainer = cfg.trainer
        # metrics.jsonl is the run's record (report, resume and the learning summary read it): written
        # whatever trainer.logger selects; "jsonl" there is accepted and changes nothing.
        self.backends.append(JsonlTracker(output_dir / "metrics.jsonl", resume_step))
        if "console" in backends:
            self.backends.append(ConsoleTracker(trainer.total_steps, trainer.progress_bar))
        if "tensorboard" in backends:
            from hybridrl.observability.tracking.tensorboard import TensorBoardTracker  # noqa: PLC0415 - torch + tensorboard, only when selected

            self.backends.append(TensorBoardTracker(output_dir / "tensorboard"))
        if "wandb" in backends or "mlflow" in backends:
            config = to_dict(cfg)
            optional = {
                "wandb": lambda: WandbTracker(trainer.project_name, trainer.experiment_name, config, str(output_dir)),
                "mlflow": lambda: MlflowTracker(
                    trainer.project_name, trainer.experiment_name, config, str(output_dir / "mlruns")
                ),
            }
            for name, make in optional.items():
                if name not in backends:
                    continue
                try:
                    self.backends.append(make())
                except MissingTrackerError as exc:  # a missing extra costs the run nothing: one warning
                    logger.warning("%s; the run goes on without it (metrics.jsonl has every metric).", exc)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for backend in self.backends:
            backend.log(metrics, step)

    def close(self) -> None:
        """Close every backend once (a second call does nothing)."""
        backends, self.backends = self.backends, []
        for backend in backends:
            backend.close()


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def read_rows(path: Path, through_step: int | None = None) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl (a torn last line from a crash is skipped)."""
    rows = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if through_step is None or row.get("step", 0) <= through_step:
                rows.append(row)
    return rows
