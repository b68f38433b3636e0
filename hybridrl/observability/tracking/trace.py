"""A timeline of the run: one Chrome-trace / Perfetto JSON file with a span per phase per process.

Open it at ui.perfetto.dev or chrome://tracing. Processes are the driver and each worker group; threads
are ranks, so overlap and idle gaps between roles are visible. Events are appended as they happen
(JSON array format, which trace viewers accept even if a crash leaves the closing bracket off).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any


class TraceWriter:
    def __init__(self, path: Path, append: bool = False) -> None:
        """``append``: go on with an existing trace (a resumed run), whose closing bracket, if any, is dropped;
        its spans keep their wall-clock times, so the gap while the run was stopped shows."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        earlier = self.path.read_text(encoding="utf-8").rstrip() if append and self.path.exists() else ""
        earlier = earlier.removesuffix("]").rstrip().removesuffix(",")
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 - open for the tracker's life, closed by close()
        self._file.write(earlier or "[\n")
        self._first = not earlier or earlier == "["
        self._pids: dict[str, int] = {}
        self._threads: set[tuple[int, int]] = set()
        # Fully asynchronous training records the generation workers' calls from the driver's generator
        # thread while the trainer's thread records its phases: one event written at a time.
        self._lock = threading.RLock()

    def _write(self, event: dict[str, Any]) -> None:
        with self._lock:
            if self._file.closed:  # a generator thread's last call, after the run closed its trace
                return
            self._file.write(("" if self._first else ",\n") + json.dumps(event))
            self._first = False

    def _pid(self, process: str) -> int:
        if process not in self._pids:
            self._pids[process] = len(self._pids) + 1
            self._write(
                {"ph": "M", "name": "process_name", "pid": self._pids[process], "tid": 0, "args": {"name": process}}
            )
            self._write(
                {
                    "ph": "M",
                    "name": "process_sort_index",
                    "pid": self._pids[process],
                    "tid": 0,
                    "args": {"sort_index": self._pids[process]},
                }
            )
        return self._pids[process]

    def span(
        self,
        process: str,
        thread: int,
        name: str,
        start: float,
        end: float,
        args: dict[str, Any] | None = None,
        thread_name: str | None = None,
    ) -> None:
        """A complete event; ``start``/``end`` are wall-clock seconds since the epoch."""
        event = {
            "ph": "X",
            "name": name,
            "cat": process,
            "tid": thread,
            "ts": start * 1e6,
            "dur": max(0.0, end - start) * 1e6,
        }
        if args:
            event["args"] = args
        with self._lock:
            pid = self._pid(process)
            if (pid, thread) not in self._threads:
                self._threads.add((pid, thread))
                self._write(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": pid,
                        "tid": thread,
                        "args": {"name": thread_name or f"rank {thread}"},
                    }
                )
            self._write({**event, "pid": pid})

    def instant(self, name: str, at: float) -> None:
        """A global instant event (a vertical line across every process in the viewer)."""
        self._write({"ph": "i", "s": "g", "name": name, "pid": 0, "tid": 0, "ts": at * 1e6})

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.write("\n]\n")
                self._file.close()
