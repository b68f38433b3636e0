"""The worker side of liveness: a daemon thread that tells the run's heartbeat board this process runs.

It beats from its own thread, so a rank busy in a long call or waiting in a collective (native code that
releases the interpreter) still beats; a stopped, swapping or wedged process does not.
"""

from __future__ import annotations

import threading
from typing import Any


def start_heartbeat(board: Any, group: str, rank: int, interval_s: float) -> threading.Event:
    """Beat every ``interval_s`` until the returned event is set (or the process ends)."""
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            board.beat.remote(group, rank)  # fire and forget: a lost beat only ages the last one
            stop.wait(interval_s)

    threading.Thread(target=run, name=f"hybridrl-heartbeat-{group}-{rank}", daemon=True).start()
    return stop
