"""The tool calls a model writes in its turn, parsed from the decoded text.

Hermes format (Qwen's chat templates, verl's ``HermesToolParser``): ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>``, anywhere in the turn, as many as the model likes. Unlike verl's parser, which logs and
drops a malformed call, a malformed call here is a ``ToolCall`` with ``error`` set: the agent loop answers it
with the error, so the model learns what it wrote wrong instead of getting silence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One call: the tool's name and its arguments; ``error`` says why the call is malformed (then ``name`` may
    be "" and ``arguments`` empty)."""

    name: str
    arguments: dict = field(default_factory=dict)
    error: str | None = None


def _read_call(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall("", {}, f"the tool call is not valid JSON ({exc}): {body.strip()[:200]!r}")
    if not isinstance(call, dict):
        return ToolCall(
            "", {}, f'the tool call is not a JSON object {{"name": ..., "arguments": {{...}}}}: {body.strip()[:200]!r}'
        )
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return ToolCall("", {}, f'the tool call has no "name" string: {body.strip()[:200]!r}')
    arguments = call.get("arguments", {})
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):  # some models write the arguments as a JSON string, as OpenAI's API does
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            return ToolCall(name, {}, f"the arguments of the call to {name!r} are a string that is not JSON ({exc})")
    if not isinstance(arguments, dict):
        return ToolCall(
            name, {}, f'the "arguments" of the call to {name!r} must be a JSON object, not {arguments!r}'[:300]
        )
    return ToolCall(name, arguments)


def parse_hermes(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` in ``text``, in order; an opening tag never closed is a malformed call."""
    calls = []
    for match in _HERMES.finditer(text):
        if match.group(2) != "</tool_call>":
            calls.append(ToolCall("", {}, "a <tool_call> has no closing </tool_call>"))
            continue
        calls.append(_read_call(match.group(1)))
    return calls


#: The parsers by ``actor_rollout_ref.rollout.multi_turn.format``.
FORMATS: dict[str, Callable[[str], list[ToolCall]]] = {"hermes": parse_hermes}
