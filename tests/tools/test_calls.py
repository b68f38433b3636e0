"""Hermes tool calls in a model's turn, well-formed or not."""

from __future__ import annotations

import pytest

from hybridrl.tools.calls import FORMATS, ToolCall, parse_hermes


def test_one_call_among_text():
    text = 'Let me check.\n<tool_call>\n{"name": "calc", "arguments": {"answer": "42"}}\n</tool_call>'
    assert parse_hermes(text) == [ToolCall("calc", {"answer": "42"})]
    assert FORMATS["hermes"] is parse_hermes


def test_several_calls_in_order_and_optional_arguments():
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> and '
        '<tool_call>{"name": "b"}</tool_call><tool_call>{"name": "c", "arguments": null}</tool_call>'
    )
    assert parse_hermes(text) == [ToolCall("a", {"x": 1}), ToolCall("b", {}), ToolCall("c", {})]


def test_arguments_as_a_json_string_are_parsed():
    text = '<tool_call>{"name": "a", "arguments": "{\\"x\\": [1, 2]}"}</tool_call>'
    assert parse_hermes(text) == [ToolCall("a", {"x": [1, 2]})]


def test_no_calls():
    assert parse_hermes("The answer is 42.") == []
    assert parse_hermes("") == []


@pytest.mark.parametrize(
    "body,name,error",
    [
        ('{"name": "a", "arguments": {"x": }', "", "not valid JSON"),
        ('["a", {}]', "", "not a JSON object"),
        ('{"arguments": {"x": 1}}', "", 'no "name" string'),
        ('{"name": 3}', "", 'no "name" string'),
        ('{"name": "a", "arguments": [1]}', "a", "the \"arguments\" of the call to 'a' must be a JSON object"),
        ('{"name": "a", "arguments": "not json"}', "a", "a string that is not JSON"),
    ],
)
def test_a_malformed_call_is_kept_with_its_error(body, name, error):
    good = '<tool_call>{"name": "ok", "arguments": {}}</tool_call>'
    (bad, ok) = parse_hermes(f"<tool_call>{body}</tool_call>{good}")
    assert bad.name == name and bad.arguments == {} and error in (bad.error or "")
    assert ok == ToolCall("ok", {})


def test_an_unclosed_tag_is_a_malformed_call():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call> then <tool_call>{"name": "b", "argu'
    first, second = parse_hermes(text)
    assert first == ToolCall("a", {})
    assert second.error == "a <tool_call> has no closing </tool_call>"
    # an opening tag followed by another call: the first is unclosed, the second still counts
    unclosed, b = parse_hermes('<tool_call>{"name": "a" <tool_call>{"name": "b"}</tool_call>')
    assert unclosed.error is not None and b == ToolCall("b", {})
