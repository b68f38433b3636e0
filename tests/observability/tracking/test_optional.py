import subprocess
import sys
import types

import pytest

from hybridrl.config.loader import load_config
from hybridrl.observability.tracking.optional import MissingTrackerError, MlflowTracker, WandbTracker, require


def test_importing_tracking_does_not_import_optional_libraries():
    # A fresh interpreter: this test process may hold stand-ins from other tests.
    code = (
        "import sys, hybridrl.observability.tracking, hybridrl.observability.tracking.optional, hybridrl.observability.tracking.tensorboard, "
        "hybridrl.observability.tracking.report, hybridrl.observability.tracking.breakdown; "
        "print(sorted(m for m in ('wandb', 'mlflow', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_require_missing_library_says_how_to_install(name, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # "not installed", even where it happens to be
    with pytest.raises(MissingTrackerError) as info:
        require(name)
    assert isinstance(info.value, ImportError)
    assert str(info.value) == (
        f"trainer.logger includes '{name}' but the {name} package is not installed: pip install 'hybridrl[{name}]'"
    )


def test_trackers_raise_the_clear_error_when_not_installed(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ImportError, match=r"pip install 'hybridrl\[wandb\]'"):
        WandbTracker("p", "n", {}, tmp_path)
    with pytest.raises(ImportError, match=r"pip install 'hybridrl\[mlflow\]'"):
        MlflowTracker("p", "n", {}, tmp_path / "mlruns")


def test_selecting_an_uninstalled_logger_warns_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    from hybridrl.observability.tracking import Tracker

    monkeypatch.setitem(sys.modules, "wandb", None)
    cfg = load_config(["trainer.total_steps=1", "trainer.progress_bar=false"])
    tracker = Tracker(["wandb"], tmp_path, cfg)
    assert [type(b).__name__ for b in tracker.backends] == ["JsonlTracker"]
    assert "trainer.logger includes 'wandb' but the wandb package" in caplog.text
    tracker.close()


def test_wandb_tracker_logs_numeric_metrics(tmp_path, monkeypatch):
    calls = []

    class Run:
        def log(self, metrics, step):
            calls.append(("log", metrics, step))

        def finish(self):
            calls.append(("finish",))

    def init(**kwargs):
        calls.append(("init", kwargs))
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    tracker = WandbTracker("proj", "exp", {"a": {"b": 1}}, tmp_path / "wb")
    tracker.log({"critic/score/mean": 0.5, "text": "x", "missing": None}, 3)
    tracker.close()
    assert calls[0] == (
        "init",
        {"project": "proj", "name": "exp", "config": {"a": {"b": 1}}, "dir": str(tmp_path / "wb")},
    )
    assert calls[1:] == [("log", {"critic/score/mean": 0.5}, 3), ("finish",)]
    assert (tmp_path / "wb").is_dir()


def test_mlflow_tracker_uses_its_own_run(tmp_path, monkeypatch):
    batches = []

    class Client:
        def __init__(self, tracking_uri):
            self.uri = tracking_uri

        def get_experiment_by_name(self, name):
            return None

        def create_experiment(self, name):
            return "7"

        def create_run(self, experiment_id, run_name):
            assert (experiment_id, run_name) == ("7", "exp")
            return types.SimpleNamespace(info=types.SimpleNamespace(run_id="r1"))

        def log_batch(self, run_id, metrics=(), params=()):
            batches.append((run_id, list(metrics), list(params)))

        def set_terminated(self, run_id):
            batches.append(("terminated", run_id))

    fake = types.SimpleNamespace(
        tracking=types.SimpleNamespace(MlflowClient=Client),
        entities=types.SimpleNamespace(Param=lambda k, v: (k, v), Metric=lambda k, v, ts, step: (k, v, step)),
    )
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    config = {"trainer": {"logger": ["mlflow"], "total_steps": 2}, "p": {f"k{i}": i for i in range(150)}}
    tracker = MlflowTracker("proj", "exp", config, tmp_path / "mlruns")
    tracker.log({"timing_s/gen": 1.5, "odd%name": 2, "text": "x"}, 4)
    tracker.close()
    params = [p for run, _, ps in batches[:-2] for p in ps]
    assert ("trainer.logger", "['mlflow']") in params and len(params) == 152
    assert all(len(ps) <= 100 for _, _, ps in batches[:-2])
    assert batches[-2] == ("r1", [("timing_s/gen", 1.5, 4), ("odd_name", 2.0, 4)], [])
    assert batches[-1] == ("terminated", "r1")
