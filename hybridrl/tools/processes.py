"""Tool calls in child processes, each with a deadline and a limit on the answer's size.

A tool is user code, as a reward function is: it can hang, crash the interpreter or answer with megabytes.
Each call runs in one of ``multi_turn.tool_num_workers`` child processes (the reward processes'
``ChildProcess``, sent generic ``"call"`` messages); a call that fails in any way becomes a ``ToolOutcome``
with an error, which the agent loop shows the model as verl does (``Error when executing tool: ...``), and the
rollout goes on.

One message is one whole call: create the tool instance, execute it, release it. So a process holds no
state between calls, any process can run any tool, and a process killed for a hang loses nothing but the
call it was running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import pickle
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from typing import Any

from hybridrl.rewards.processes import ChildProcess, describe_exit
from hybridrl.tools.base import BaseTool, ToolResponse
from hybridrl.tools.calls import ToolCall
from hybridrl.tools.config import ToolSpec, build_tool
from hybridrl.tools.interactions import BaseInteraction, InteractionSpec, build_interaction

logger = logging.getLogger(__name__)

_TOOL_CALL, _USER_TURN = 0, 1  # the keys of run_tool_call and run_interaction_turn among a child's functions


@dataclass(frozen=True)
class ToolOutcome:
    """A finished call: ``error is None`` for success; on error ``text`` is what the model is shown."""

    text: str
    reward: float = 0.0
    error: str | None = None
    metrics: dict = field(default_factory=dict)
    timed_out: bool = False  # the error is the call's deadline
    terminate: bool = False  # an interaction's turn: the user ends the conversation


def _failed(error: str, timed_out: bool = False) -> ToolOutcome:
    return ToolOutcome(text=f"Error when executing tool: {error}", error=error, timed_out=timed_out)


# --- in the child process -------------------------------------------------------------------------------

_tools: dict[ToolSpec, BaseTool] = {}  # built once per child process
_interactions: dict[InteractionSpec, BaseInteraction] = {}
_loop: asyncio.AbstractEventLoop | None = None  # one event loop per child: a tool may keep loop-bound state


async def _create_execute_release(tool: BaseTool, arguments: dict, create_kwargs: dict) -> Any:
    created = await tool.create(create_kwargs=create_kwargs)
    instance_id = created[0] if isinstance(created, tuple) else created  # older verl tools return the id only
    try:
        return await tool.execute(instance_id, arguments)
    finally:
        await tool.release(instance_id)


def _read_result(what: str, result: Any, max_response_bytes: int) -> ToolOutcome:
    """``execute``'s answer in any of the shapes verl tools give: (response, reward, metrics) or a response
    alone, where a response is a ToolResponse, a string or a dict with "text"."""
    response, reward, metrics = result if isinstance(result, tuple) and len(result) == 3 else (result, 0.0, {})
    if isinstance(response, ToolResponse):
        text = response.text
    elif isinstance(response, dict):
        text = response.get("text")
    else:
        text = response
    if text is None:
        text = ""
    if not isinstance(text, str):
        return _failed(f"{what} returned a {type(text).__name__} as its text; return a string or a ToolResponse")
    size = len(text.encode("utf-8", errors="replace"))
    if size > max_response_bytes:
        return _failed(
            f"{what} returned {size} bytes, more than "
            f"actor_rollout_ref.rollout.multi_turn.tool_max_response_bytes={max_response_bytes}"
        )
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return _failed(f"{what} returned the step reward {reward!r}; it must be a finite float")
    if metrics is None:
        metrics = {}
    if not isinstance(metrics, dict):
        return _failed(f"{what} returned metrics of type {type(metrics).__name__}; return a dict")
    return ToolOutcome(text=text, reward=float(reward), metrics=metrics)


def run_tool_call(spec: ToolSpec, arguments: dict, create_kwargs: dict, max_response_bytes: int) -> ToolOutcome:
    """One call in the child: create, execute, release on the child's event loop. An exception of the tool is
    an error outcome; a ``sys.exit`` is not caught, so it ends the process like a crash (the driver says so)."""
    what = f"tool {spec.name!r} ({spec.class_name})"
    try:
        if spec not in _tools:
            _tools[spec] = build_tool(spec)
        result = _on_loop(_create_execute_release(_tools[spec], arguments, create_kwargs))
    except Exception as exc:
        return _failed(f"{what} raised {type(exc).__name__}: {exc}")
    return _read_result(what, result, max_response_bytes)


def _on_loop(coroutine: Any) -> Any:
    """``coroutine`` run to its end on the child's one event loop (a tool may keep loop-bound state)."""
    global _loop
    if _loop is None:
        _loop = asyncio.new_event_loop()
    return _loop.run_until_complete(coroutine)


async def _interaction_turn(interaction: BaseInteraction, kwargs: dict, messages: list[dict]) -> Any:
    instance_id = await interaction.start_interaction(None, **kwargs)
    try:
        return await interaction.generate_response(instance_id, messages, **kwargs)
    finally:
        await interaction.finalize_interaction(instance_id)


def run_interaction_turn(
    spec: InteractionSpec, kwargs: dict, messages: list[dict], max_response_bytes: int
) -> ToolOutcome:
    """One user turn in the child: start the interaction with the row's ``interaction_kwargs``, answer the
    conversation so far, finalize. Its message is ``text``, its score ``reward``, its wish to end ``terminate``."""
    what = f"interaction {spec.name!r} ({spec.class_name})"
    try:
        if spec not in _interactions:
            _interactions[spec] = build_interaction(spec)
        terminate, text, score, metrics = _on_loop(_interaction_turn(_interactions[spec], kwargs, messages))
    except Exception as exc:
        return _failed(f"{what} raised {type(exc).__name__}: {exc}")
    outcome = _read_result(what, (str(text), score if score is not None else 0.0, metrics), max_response_bytes)
    return replace(outcome, terminate=bool(terminate))


# --- in the driver ----------------------------------------------------------------------------------------


@dataclass
class _Call:
    """A queued or running call: a tool's (``_TOOL_CALL``) or an interaction's turn (``_USER_TURN``), run in the
    child as ``function(*args, max_response_bytes)``."""

    call_id: int
    name: str
    function: int
    args: tuple
    deadline: float = math.inf  # set when a child starts it

    @property
    def what(self) -> str:
        return f"{'tool' if self.function == _TOOL_CALL else 'interaction'} {self.name!r}"


class ToolProcesses:
    """``num_workers`` processes shared by all tools; calls are queued, run as processes free up, and collected
    as they finish. A call that hangs past ``timeout_s`` or kills its process is an error outcome, and its
    process is replaced; the other calls keep running."""

    def __init__(self, specs: list[ToolSpec], num_workers: int, timeout_s: float, max_response_bytes: int) -> None:
        if num_workers < 1:
            raise ValueError(
                f"actor_rollout_ref.rollout.multi_turn.tool_num_workers={num_workers}: tools need at least one process."
            )
        self.specs = {spec.name: spec for spec in specs}
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.max_response_bytes = max_response_bytes
        # by reference: the child imports this module
        self._blobs = {_TOOL_CALL: pickle.dumps(run_tool_call), _USER_TURN: pickle.dumps(run_interaction_turn)}
        self._children: list[ChildProcess] = []  # started on first use
        self._running: dict[ChildProcess, _Call] = {}
        self._queue: deque[_Call] = deque()
        self._finished: list[tuple[int, ToolOutcome]] = []

    def submit(self, call_id: int, call: ToolCall, create_kwargs: dict) -> None:
        """Queue ``call``; a malformed call or an unknown tool is finished at once (an error, no process)."""
        if call.error is not None:
            self._finish(call_id, call.name or "?", _failed(call.error))
        elif call.name not in self.specs:
            known = ", ".join(sorted(self.specs)) or "none"
            self._finish(call_id, call.name, _failed(f"there is no tool {call.name!r}; the tools are: {known}"))
        else:
            spec = self.specs[call.name]
            self._queue.append(_Call(call_id, spec.name, _TOOL_CALL, (spec, call.arguments, create_kwargs)))
            self._dispatch()

    def submit_user_turn(self, call_id: int, spec: InteractionSpec, kwargs: dict, messages: list[dict]) -> None:
        """Queue an interaction's answer to ``messages`` (the conversation so far), with the tools' deadline."""
        self._queue.append(_Call(call_id, spec.name, _USER_TURN, (spec, kwargs, messages)))
        self._dispatch()

    def collect(self, block: bool, until: float | None = None) -> list[tuple[int, ToolOutcome]]:
        """The calls finished since the last collect. ``block``: wait until one finishes or a running call's
        deadline passes (when nothing has finished yet and something is pending), or until the monotonic time
        ``until``."""
        while True:
            self._dispatch()
            now = time.monotonic()
            if self._running:
                waiting = block and not self._finished
                earliest = min([c.deadline for c in self._running.values()] + ([until] if until is not None else []))
                self._receive(max(0.0, earliest - now) if waiting else 0.0)
                self._expire(time.monotonic())
            if self._finished or not block or not self.pending():
                break
            if until is not None and time.monotonic() >= until:
                break
        self._dispatch()  # processes freed just now start the queued calls (their deadlines run from here)
        finished, self._finished = self._finished, []
        return finished

    def pending(self) -> int:
        """Calls queued or running."""
        return len(self._queue) + len(self._running)

    def close(self) -> None:
        """Stop the processes; calls still running or queued are dropped."""
        for child in self._children:
            child.stop()
        self._children, self._running = [], {}
        self._queue.clear()

    def _dispatch(self) -> None:
        """Start queued calls on idle processes, starting processes up to ``num_workers``."""
        while self._queue:
            idle = [c for c in self._children if c not in self._running]
            if not idle and len(self._children) < self.num_workers:
                self._children.append(ChildProcess())
                continue
            if not idle:
                return
            child, call = idle[0], self._queue.popleft()
            args = (*call.args, self.max_response_bytes)
            try:
                if call.function not in child.known:
                    child.outbox.send(("fn", call.function, self._blobs[call.function]))
                    child.known.add(call.function)
                child.outbox.send(("call", call.call_id, call.function, args))
            except OSError:  # it died while idle (killed from outside): a fresh process takes the call
                self._queue.appendleft(call)
                self._replace(child)
                continue
            except Exception as exc:  # create_kwargs that do not pickle (pickling comes before writing)
                self._finish(call.call_id, call.name, _failed(f"its arguments cannot be sent: {exc}"))
                continue
            call.deadline = time.monotonic() + self.timeout_s
            child.running = call.call_id
            self._running[child] = call

    def _receive(self, timeout: float) -> None:
        """Read the answers that arrive within ``timeout``; a process that closed its pipe died mid-call."""
        by_inbox = {child.inbox: child for child in self._running}
        for conn in wait(list(by_inbox), timeout=timeout):
            child = by_inbox[conn]  # type: ignore[index]
            call = self._running.pop(child)
            child.running = None
            try:
                _, outcome, error = child.inbox.recv()
            except (EOFError, OSError):
                with contextlib.suppress(subprocess.TimeoutExpired):  # the pipe closes as it exits: get the status
                    child.proc.wait(timeout=5)
                outcome = _failed(f"the tool process died ({describe_exit(child.proc.returncode)})")
                self._replace(child)
            else:
                if error is not None:  # the call itself failed outside the tool (its spec did not unpickle)
                    outcome = _failed(f"{call.what} could not run: {error}")
            self._finish(call.call_id, call.name, outcome)

    def _expire(self, now: float) -> None:
        """Calls past their deadline: an error each, and their processes are replaced."""
        for child, call in list(self._running.items()):
            if now >= call.deadline:
                del self._running[child]
                self._replace(child)
                self._finish(
                    call.call_id,
                    call.name,
                    _failed(
                        f"{call.what} did not return within "
                        f"actor_rollout_ref.rollout.multi_turn.tool_timeout_s={self.timeout_s:g} s",
                        timed_out=True,
                    ),
                )

    def _replace(self, child: ChildProcess) -> None:
        """Stop ``child`` and put a fresh process in its place."""
        child.stop()
        self._children[self._children.index(child)] = ChildProcess()

    def _finish(self, call_id: int, name: str, outcome: ToolOutcome) -> None:
        if outcome.error is not None:
            logger.warning("Tool call %d (%s) failed: %s", call_id, name, outcome.error)
        self._finished.append((call_id, outcome))
