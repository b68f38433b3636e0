"""The run's timeline file: a resumed run goes on in the same trace, with each leg marked."""

from __future__ import annotations

import json

from hybridrl.observability.tracking.trace import TraceWriter


def test_a_resumed_trace_goes_on_in_the_same_file(tmp_path):
    path = tmp_path / "trace.json"
    first = TraceWriter(path)
    first.instant("leg 1: start", 100.0)
    first.span("driver", 0, "step", 100.0, 101.0)
    first.close()
    crashed = TraceWriter(path, append=True)  # a crash leaves no closing bracket: still readable
    crashed.span("driver", 0, "step", 200.0, 201.0)
    crashed.flush()
    resumed = TraceWriter(path, append=True)
    resumed.instant("leg 2: resumed after step 1", 300.0)
    resumed.span("driver", 0, "step", 300.0, 302.0)
    resumed.close()
    events = json.loads(path.read_text())
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["ts"] for e in spans] == [100e6, 200e6, 300e6]
    assert [e["name"] for e in events if e["ph"] == "i"] == ["leg 1: start", "leg 2: resumed after step 1"]
    fresh = TraceWriter(path)  # not a resume: a new file
    fresh.close()
    assert json.loads(path.read_text()) == []
