"""User reward code in child processes, with a deadline per batch.

A reward function is the user's code: it can hang, crash the interpreter (a segfault in a C extension,
``os._exit``) or call ``sys.exit``. In the driver any of these would hang or end the whole run, so each
sample is scored in one of ``reward.num_workers`` child processes. A sample whose process dies, or that is
still running when the batch's ``reward.timeout_s`` runs out, becomes the usual ``RewardError`` naming the
function, the sample and its data source; the process is replaced and the run's policy
(``reward.on_error``) decides what happens next.

Written here rather than on ``concurrent.futures.ProcessPoolExecutor``: the executor cannot say which task a
dead process was running, cannot stop a task that hangs, and marks every pending task broken after one
crash. The children are plain ``python -m`` processes (not ``multiprocessing``'s spawn, which re-imports
the driver's ``__main__`` and with it torch) that talk over two pipes of their own, so what a reward
function prints still reaches the run's log.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, cast

from hybridrl.rewards.registry import RewardError, RewardFn, Scored, function_name, score_in_one_call, score_sample

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """One sample to score: the function for it and verl's four arguments."""

    fn: RewardFn
    data_source: str
    response: str
    ground_truth: Any
    extra_info: Any = None


def describe_exit(returncode: int | None) -> str:
    """How a child process ended, in words for an error message ("exit code 3", "killed by SIGSEGV")."""
    if returncode is None:
        return "no exit status"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _sample_text(index: int, sample: Sample) -> str:
    return f"sample {index} (data_source={sample.data_source!r}, response={sample.response[:200]!r})"


class ChildProcess:
    """One ``python -m hybridrl.rewards.processes`` process and the task it is running (also used by
    hybridrl.tools.processes, which sends it generic ``"call"`` messages)."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        # The child unpickles functions by module path: the driver's import path (tests, user packages) too.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hybridrl.rewards.processes", str(to_child_r), str(from_child_w)],
            pass_fds=(to_child_r, from_child_w),
            env=env,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self.inbox = Connection(from_child_r, writable=False)
        self.outbox = Connection(to_child_w, readable=False)
        self.known: set[int] = set()  # functions this child has been sent (keys of RewardProcesses._fns)
        self.running: int | None = None  # the sample it is scoring

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.inbox.close()
        self.outbox.close()


class RewardProcesses:
    """A fixed number of scoring processes, started on first use and replaced when one dies or hangs."""

    def __init__(self, num_workers: int, timeout_s: float) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers={num_workers}: scoring in processes needs at least one.")
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self._children: list[ChildProcess] = []
        self._fns: dict[int, bytes] = {}  # id(fn) -> the pickled function, sent once per child
        self._fn_keys: dict[int, int] = {}

    def _key(self, fn: Callable[..., Any]) -> int:
        if id(fn) not in self._fn_keys:
            try:
                blob = pickle.dumps(fn)
            except Exception as exc:
                raise RewardError(
                    f"Reward function {function_name(fn)} cannot be sent to the reward processes ({exc}): define it "
                    f"at module level in an importable file, or set reward.num_workers=0 to score in the driver "
                    f"(no reward.timeout_s deadline then)."
                ) from None
            key = len(self._fns)
            self._fns[key] = blob
            self._fn_keys[id(fn)] = key
        return self._fn_keys[id(fn)]

    def _function_on(self, child: ChildProcess, fn: Callable[..., Any]) -> int:
        """``fn``'s key, after sending ``child`` the function if it has not had it yet."""
        key = self._key(fn)
        if key not in child.known:
            child.outbox.send(("fn", key, self._fns[key]))
            child.known.add(key)
        return key

    def _start(self, count: int) -> None:
        for child in self._children:  # one that died between batches (killed from outside)
            if child.proc.poll() is not None:
                self._replace(child)
        while len(self._children) < min(self.num_workers, count):
            self._children.append(ChildProcess())

    def _send(self, child: ChildProcess, index: int, sample: Sample) -> None:
        key = self._function_on(child, sample.fn)
        child.outbox.send(
            ("score", index, key, (sample.data_source, sample.response, sample.ground_truth, sample.extra_info))
        )
        child.running = index

    def score(self, samples: Sequence[Sample]) -> list[Scored | RewardError]:
        """Each sample's score, or the RewardError that says why it has none; never raises for one sample."""
        results: list[Scored | RewardError | None] = [None] * len(samples)
        queue = deque(range(len(samples)))
        self._start(len(samples))
        deadline = time.monotonic() + self.timeout_s
        idle = list(self._children)
        while queue or any(c.running is not None for c in self._children):
            while queue and idle:
                index = queue.popleft()
                self._send(idle.pop(), index, samples[index])
            busy = {c.inbox: c for c in self._children if c.running is not None}
            ready = wait(list(busy), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self._time_out(samples, results)
                break
            for conn in ready:
                child = busy[conn]  # type: ignore[index]
                assert child.running is not None
                index = child.running
                try:
                    _, value, error = child.inbox.recv()
                except (EOFError, OSError):
                    replacement = self._replace(child)
                    results[index] = RewardError(
                        f"The reward process scoring {_sample_text(index, samples[index])} with "
                        f"{function_name(samples[index].fn)} died ({describe_exit(child.proc.returncode)}): a crash in "
                        f"the reward function or a library it calls; fix it (reward.on_error=fail scores such "
                        f"samples as failed)."
                    )
                    idle.append(replacement)
                    continue
                results[index] = RewardError(error) if error is not None else value
                child.running = None
                idle.append(child)
        return cast(list[Scored | RewardError], results)  # every sample has its outcome now

    def score_in_one_call(
        self, fn: Callable[..., Any], rows: tuple[list, list, list, list]
    ) -> list[Scored] | RewardError:
        """verl's batch reward manager in a child: one call for the whole batch under the batch's deadline; a
        crash or a hang fails every sample of the batch."""
        self._start(1)
        child = self._children[0]
        child.outbox.send(("batch", self._function_on(child, fn), rows))
        child.running = -1
        what = f"batch reward function {function_name(fn)} on a batch of {len(rows[0])} samples"
        if not wait([child.inbox], timeout=self.timeout_s):
            self._replace(child)
            return RewardError(
                f"The {what} did not return within reward.timeout_s={self.timeout_s:g} s: it hangs or is too "
                f"slow; fix it, or raise reward.timeout_s."
            )
        try:
            _, value, error = child.inbox.recv()
        except (EOFError, OSError):
            self._replace(child)
            return RewardError(
                f"The reward process running the {what} died ({describe_exit(child.proc.returncode)}): a crash "
                f"in the reward function or a library it calls; fix it."
            )
        child.running = None
        return RewardError(error) if error is not None else value

    def _time_out(self, samples: Sequence[Sample], results: list[Scored | RewardError | None]) -> None:
        """The batch's deadline passed: the samples still running are the slow ones; their processes go."""
        for child in list(self._children):
            if child.running is None:
                continue
            index = child.running
            results[index] = RewardError(
                f"Reward function {function_name(samples[index].fn)} did not return within reward.timeout_s="
                f"{self.timeout_s:g} s on {_sample_text(index, samples[index])}: it hangs or is too slow; fix it, or "
                f"raise reward.timeout_s (reward.num_workers scores more samples at once)."
            )
            self._replace(child)
        for index, value in enumerate(results):
            if value is None:
                results[index] = RewardError(
                    f"Reward function {function_name(samples[index].fn)} was not run on "
                    f"{_sample_text(index, samples[index])}: the batch's reward.timeout_s={self.timeout_s:g} s ran "
                    f"out first; raise reward.timeout_s or reward.num_workers."
                )

    def _replace(self, child: ChildProcess) -> ChildProcess:
        """Stop ``child`` (dead, or running past the deadline) and put a fresh process in its place."""
        child.stop()
        self._children[self._children.index(child)] = fresh = ChildProcess()
        return fresh

    def close(self) -> None:
        for child in self._children:
            child.stop()
        self._children = []


def _call(
    blobs: dict[int, bytes], fns: dict[int, Callable[..., Any]], index: int, key: int, args: tuple
) -> tuple[int, Any, str | None]:
    """A generic ``("call", index, key, args)`` message: ``fns[key](*args)``, or the exception in words. Only
    ``Exception`` is caught: a ``sys.exit`` in the function ends the process, as a crash would."""
    try:
        if key not in fns:
            fns[key] = pickle.loads(blobs[key])
        return index, fns[key](*args), None
    except Exception as exc:
        return index, None, f"{type(exc).__name__}: {exc}"


def _serve(inbox: Connection, outbox: Connection) -> None:
    """The child's loop: load functions as they come, score one sample (or, for verl's batch manager, one
    batch, or run one generic call) per message, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle; it stops us
    blobs: dict[int, bytes] = {}
    fns: dict[int, Callable[..., Any]] = {}
    while True:
        try:
            message = inbox.recv()
        except EOFError:  # the driver closed the pipe or died
            return
        if message[0] == "fn":
            blobs[message[1]] = message[2]
            continue
        kind, index, key, args = (
            message if message[0] in ("score", "call") else (message[0], -1, message[1], message[2])
        )
        if kind == "call":
            reply = _call(blobs, fns, index, key, args)
            try:
                outbox.send(reply)
            except Exception as exc:  # a result that does not pickle (send pickles before it writes)
                outbox.send((index, None, f"its result cannot be sent back: {type(exc).__name__}: {exc}"))
            continue
        try:
            if key not in fns:
                try:
                    fns[key] = pickle.loads(blobs[key])
                except Exception as exc:
                    raise RewardError(
                        f"Loading the reward function in its process failed: {type(exc).__name__}: {exc}"
                    ) from None
            if kind == "batch":
                outbox.send((index, score_in_one_call(fns[key], *args), None))
            else:
                outbox.send((index, score_sample(fns[key], index, *args), None))
        except RewardError as exc:
            outbox.send((index, None, str(exc)))


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
