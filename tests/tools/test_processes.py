"""Tool calls in child processes: an answer, or one error line the model is shown, whatever the tool does."""

from __future__ import annotations

import logging
import textwrap

import pytest

from hybridrl.tools.calls import ToolCall, parse_hermes
from hybridrl.tools.config import ToolSpec, load_tool_config
from hybridrl.tools.lookup import LOOKUP_TOOL_SCHEMA
from hybridrl.tools.processes import ToolOutcome, ToolProcesses
from tests.tools.sample_tools import SAMPLE_SCHEMA

SAMPLE = ToolSpec("tests.tools.sample_tools.SampleTool", {}, SAMPLE_SCHEMA)
OLD_STYLE = ToolSpec(
    "tests.tools.sample_tools.OldStyleTool", {}, {"type": "function", "function": {"name": "old", "parameters": {}}}
)
LOOKUP = ToolSpec("hybridrl.tools.lookup.LookupTool", {}, LOOKUP_TOOL_SCHEMA)
LIMIT = 1 << 20


@pytest.fixture(scope="module")
def pool():
    tools = ToolProcesses([SAMPLE, OLD_STYLE, LOOKUP], num_workers=2, timeout_s=60.0, max_response_bytes=LIMIT)
    yield tools
    tools.close()


def run(pool: ToolProcesses, *calls: ToolCall, create_kwargs: dict | None = None) -> list[ToolOutcome]:
    """Submit ``calls`` at once (ids 0, 1, ...) and collect until all have finished."""
    for call_id, call in enumerate(calls):
        pool.submit(call_id, call, create_kwargs or {})
    finished: dict[int, ToolOutcome] = {}
    while pool.pending():
        finished.update(pool.collect(block=True))
    finished.update(pool.collect(block=False))
    assert sorted(finished) == list(range(len(calls)))
    return [finished[i] for i in range(len(calls))]


def sample(do: str, **arguments: str) -> ToolCall:
    return ToolCall("sample", {"do": do, **arguments})


def pids(pool: ToolProcesses) -> set[int]:
    """The two processes' ids, from two calls submitted together (each goes to its own idle process)."""
    outcomes = run(pool, sample("echo"), sample("echo"))
    assert all(o.error is None for o in outcomes)
    return {o.metrics["pid"] for o in outcomes}


def test_a_call_returns_its_text_reward_and_metrics(pool):
    (echo,) = run(pool, sample("echo", text="hi"))
    assert echo.text == "echo hi" and echo.reward == 0.25 and echo.error is None and "pid" in echo.metrics


def test_the_shapes_verl_tools_answer_in(pool):
    bare, from_dict, old = run(
        pool, sample("bare_str"), sample("dict"), ToolCall("old", {}), create_kwargs={"value": 7}
    )
    assert bare == ToolOutcome(text="a bare string")
    assert from_dict == ToolOutcome(text="from a dict", reward=0.5, metrics={"n": 1})
    assert old == ToolOutcome(text="the-id 7", reward=1.0)
    (looked_up,) = run(pool, ToolCall("lookup", {}), create_kwargs={"value": "swordfish"})
    assert looked_up == ToolOutcome(text="swordfish")


@pytest.mark.parametrize(
    "do,error",
    [
        ("raise", "tool 'sample' (tests.tools.sample_tools.SampleTool) raised KeyError: 'boom'"),
        (
            "nan",
            "tool 'sample' (tests.tools.sample_tools.SampleTool) returned the step reward nan; it must be a finite float",
        ),
        ("os_exit", "the tool process died (exit code 3)"),
        ("sys_exit", "the tool process died (exit code 4)"),
        (
            "big",
            "tool 'sample' (tests.tools.sample_tools.SampleTool) returned 10000000 bytes, more than "
            f"actor_rollout_ref.rollout.multi_turn.tool_max_response_bytes={LIMIT}",
        ),
    ],
)
def test_a_failing_call_is_one_error_and_the_next_call_succeeds(pool, caplog, do, error):
    before = pids(pool)
    with caplog.at_level(logging.WARNING, logger="hybridrl.tools.processes"):
        (failed,) = run(pool, sample(do))
    assert failed == ToolOutcome(text=f"Error when executing tool: {error}", error=error)
    assert [r.getMessage() for r in caplog.records] == [f"Tool call 0 (sample) failed: {error}"]
    after = pids(pool)  # both processes serve calls; one that died was replaced
    assert len(after) == 2 and len(before & after) == (1 if "died" in error else 2)


def test_an_unknown_tool_or_a_malformed_call_fails_at_once_without_a_process(caplog):
    tools = ToolProcesses([SAMPLE], num_workers=2, timeout_s=60.0, max_response_bytes=LIMIT)
    try:
        (malformed,) = parse_hermes('<tool_call>{"name": "sample", "arguments": {"do": }</tool_call>')
        with caplog.at_level(logging.WARNING, logger="hybridrl.tools.processes"):
            tools.submit(0, ToolCall("search", {"q": "x"}), {})
            tools.submit(1, malformed, {})
        assert tools.pending() == 0
        (_, unknown), (_, bad) = tools.collect(block=True)
        assert unknown.error == "there is no tool 'search'; the tools are: sample"
        assert unknown.text == "Error when executing tool: there is no tool 'search'; the tools are: sample"
        assert bad.error is not None and bad.error.startswith("the tool call is not valid JSON")
        first, second = (r.getMessage() for r in caplog.records)
        assert first == "Tool call 0 (search) failed: there is no tool 'search'; the tools are: sample"
        assert second.startswith("Tool call 1 (?) failed: the tool call is not valid JSON")
        assert tools.collect(block=True) == [] and not tools._children  # nothing was started
    finally:
        tools.close()


def test_a_hanging_call_times_out_while_a_call_on_the_other_process_finishes(caplog):
    tools = ToolProcesses([SAMPLE], num_workers=2, timeout_s=1.0, max_response_bytes=LIMIT)
    try:
        with caplog.at_level(logging.WARNING, logger="hybridrl.tools.processes"):
            # the third call waits for a free process; its deadline runs from when it starts
            hang, echo, queued = run(tools, sample("hang"), sample("echo", text="meanwhile"), sample("echo"))
        error = "tool 'sample' did not return within actor_rollout_ref.rollout.multi_turn.tool_timeout_s=1 s"
        assert hang == ToolOutcome(text=f"Error when executing tool: {error}", error=error, timed_out=True)
        assert echo.text == "echo meanwhile" and echo.error is None and queued.text == "echo "
        assert [r.getMessage() for r in caplog.records] == [f"Tool call 0 (sample) failed: {error}"]
        assert [o.text for o in run(tools, sample("echo", text="after"))] == ["echo after"]
    finally:
        tools.close()


def test_queued_calls_run_as_processes_free_up(pool):
    outcomes = run(pool, *(sample("echo", text=str(i)) for i in range(7)))
    assert [o.text for o in outcomes] == [f"echo {i}" for i in range(7)]
    assert len({o.metrics["pid"] for o in outcomes}) <= 2


def test_verls_gsm8k_tool_scores_answers_in_the_processes(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(
        textwrap.dedent(
            """
            tools:
              - class_name: verl.tools.gsm8k_tool.Gsm8kTool
                config: {type: native}
                tool_schema:
                  type: function
                  function:
                    name: calc_gsm8k_reward
                    parameters: {type: object, properties: {answer: {type: string}}, required: [answer]}
            """
        )
    )
    tools = ToolProcesses(load_tool_config(str(path)), num_workers=2, timeout_s=60.0, max_response_bytes=LIMIT)
    try:
        right, wrong = (
            run(tools, ToolCall("calc_gsm8k_reward", {"answer": answer}), create_kwargs={"ground_truth": "72"})[0]
            for answer in ("72", "#### 71")
        )
    finally:
        tools.close()
    assert right == ToolOutcome(text="Current parsed answer='72' reward=1.0", reward=0.0)
    assert wrong == ToolOutcome(text="Current parsed answer='#### 71' reward=0.0", reward=-0.05)
