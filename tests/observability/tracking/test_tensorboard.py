import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from hybridrl.observability.tracking.tensorboard import TensorBoardTracker


def test_scalars_round_trip(tmp_path):
    log_dir = tmp_path / "tensorboard"
    tracker = TensorBoardTracker(log_dir)
    for step in (1, 2, 3):
        tracker.log(
            {
                "critic/score/mean": 0.1 * step,
                "timing_s/gen": np.float32(step),
                "perf/throughput": 100 * step,
                "actor/lr": torch.tensor(1e-3),
                "note": "text is not a scalar",
                "actor/kl_loss": None,
                "flag": True,
            },
            step,
        )
    tracker.close()

    assert list(log_dir.glob("events.out.tfevents.*"))
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"critic/score/mean", "timing_s/gen", "perf/throughput", "actor/lr"}
    score = acc.Scalars("critic/score/mean")
    assert [e.step for e in score] == [1, 2, 3]
    assert np.allclose([e.value for e in score], [0.1, 0.2, 0.3])
    assert [e.value for e in acc.Scalars("perf/throughput")] == [100.0, 200.0, 300.0]
