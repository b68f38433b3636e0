"""Backends for libraries that are optional extras: Weights & Biases and MLflow.

Neither library is a dependency of hybridrl, so each is imported in its tracker's ``__init__`` only:
importing ``hybridrl.observability.tracking`` never imports them, and a run that does not select them
does not need them. Selecting one that is not installed fails at start-up with
:class:`MissingTrackerError`, which says how to install it, rather than with a bare
``ModuleNotFoundError`` deep in the trainer.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from hybridrl.observability.tracking.breakdown import as_number

#: The ``pip install`` extra that brings in each optional tracking library.
EXTRAS = {"wandb": "wandb", "mlflow": "mlflow"}


class MissingTrackerError(ImportError):
    """A tracker selected in ``trainer.logger`` needs a library that is not installed."""


def require(name: str) -> ModuleType:
    """Import the optional library ``name``, or raise :class:`MissingTrackerError` saying how to get it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        extra = EXTRAS.get(name, name)
        missing = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and (missing == name or (missing or "").startswith(name + ".")):
            message = (
                f"trainer.logger includes '{name}' but the {name} package is not installed: "
                f"pip install 'hybridrl[{extra}]'"
            )
        else:  # installed but broken (a dependency of it is missing or incompatible)
            message = (
                f"trainer.logger includes '{name}' but importing {name} failed ({exc}); "
                f"reinstall it with: pip install --force-reinstall 'hybridrl[{extra}]'"
            )
        raise MissingTrackerError(message, name=name) from exc


def numeric_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics only: both services reject strings and nulls as metric values."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        number = as_number(value)
        if number is not None:
            out[key] = number
    return out


class WandbTracker:
    """Logs each step to a Weights & Biases run (online or offline, as ``WANDB_MODE`` says)."""

    def __init__(self, project: str, name: str, config_dict: dict[str, Any], dir: str | Path) -> None:
        wandb = require("wandb")
        Path(dir).mkdir(parents=True, exist_ok=True)  # wandb wants the directory to exist
        self._run = wandb.init(project=project, name=name, config=config_dict, dir=str(dir))

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self._run.log(numeric_metrics(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


# MLflow limits (the lowest across server versions): names of allowed characters, 100 parameters per
# batch, 500 characters per parameter value.
_MLFLOW_BAD_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")
_MLFLOW_BATCH = 100
_MLFLOW_PARAM_CHARS = 500


def _flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """Nested config as dotted ``key=value`` pairs: MLflow parameters are flat strings."""
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _flatten(value, dotted + ".")
        else:
            yield dotted, str(value)


class MlflowTracker:
    """Logs each step to an MLflow run in a local file store (``<output_dir>/mlruns`` by default).

    It uses an ``MlflowClient`` with an explicit run id rather than the fluent ``mlflow.start_run``,
    so it neither depends on nor disturbs a run the calling process may already have active.
    """

    def __init__(
        self, experiment: str, run_name: str, config_dict: dict[str, Any], tracking_uri_dir: str | Path
    ) -> None:
        mlflow = require("mlflow")
        store = Path(tracking_uri_dir).resolve()
        store.mkdir(parents=True, exist_ok=True)
        self._entities = mlflow.entities
        self._client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self._client.create_experiment(experiment)
        self._run_id = self._client.create_run(experiment_id, run_name=run_name).info.run_id
        params = [
            self._entities.Param(_MLFLOW_BAD_CHARS.sub("_", key), value[:_MLFLOW_PARAM_CHARS])
            for key, value in _flatten(config_dict)
        ]
        for start in range(0, len(params), _MLFLOW_BATCH):
            self._client.log_batch(self._run_id, params=params[start : start + _MLFLOW_BATCH])

    def log(self, metrics: dict[str, Any], step: int) -> None:
        now = int(time.time() * 1000)
        batch = [
            self._entities.Metric(_MLFLOW_BAD_CHARS.sub("_", key), value, now, step)
            for key, value in numeric_metrics(metrics).items()
        ]
        for start in range(0, len(batch), _MLFLOW_BATCH):
            self._client.log_batch(self._run_id, metrics=batch[start : start + _MLFLOW_BATCH])

    def close(self) -> None:
        self._client.set_terminated(self._run_id)
