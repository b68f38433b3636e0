"""verl's tool YAML: the tools it names, and one line per mistake naming the file, the tool and the fix."""

from __future__ import annotations

import asyncio
import pickle
import re
import textwrap

import pytest

from hybridrl.tools.base import BaseTool, OpenAIFunctionToolSchema, ToolResponse, ToolSchema
from hybridrl.tools.config import ToolSpec, build_tool, load_tool_config
from hybridrl.tools.gsm8k import Gsm8kTool
from hybridrl.tools.lookup import LOOKUP_TOOL_SCHEMA, LookupTool

# verl's examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml, as users have it.
VERL_GSM8K = """
tools:
  - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_gsm8k_reward"
        description: "A tool for calculating the reward of gsm8k. (1.0 if parsed answer is correct, 0.0 if parsed answer is incorrect or not correctly parsed)"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The model's answer to the GSM8K math problem, must be a digits"
          required: ["answer"]
  - class_name: tests.tools.sample_tools.SampleTool
    tool_schema: {type: function, function: {name: sample}}
"""


def write(tmp_path, text: str) -> str:
    path = tmp_path / "tools.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_verl_tool_config_loads_with_verls_gsm8k_class_mapped_to_ours(tmp_path):
    specs = load_tool_config(write(tmp_path, VERL_GSM8K))
    assert [(s.name, s.class_name) for s in specs] == [
        ("calc_gsm8k_reward", "hybridrl.tools.gsm8k.Gsm8kTool"),
        ("sample", "tests.tools.sample_tools.SampleTool"),
    ]
    gsm8k, sample = specs
    assert gsm8k.config == {"type": "native"} and sample.config == {}
    assert gsm8k.schema["function"]["parameters"]["required"] == ["answer"]
    assert sample.tool_schema().model_dump() == {
        "type": "function",
        "function": {"name": "sample", "description": "", "parameters": {}},
    }
    assert pickle.loads(pickle.dumps(gsm8k)) == gsm8k and hash(pickle.loads(pickle.dumps(gsm8k))) == hash(gsm8k)
    tool = build_tool(gsm8k)
    assert isinstance(tool, Gsm8kTool) and tool.name == "calc_gsm8k_reward"
    assert tool.get_openai_tool_schema().model_dump(exclude_unset=True, exclude_none=True) == gsm8k.schema


def test_verls_older_module_path_maps_too(tmp_path):
    path = write(tmp_path, VERL_GSM8K.replace("verl.tools.gsm8k_tool", "verl.workers.tool.gsm8k_tool"))
    assert load_tool_config(path)[0].class_name == "hybridrl.tools.gsm8k.Gsm8kTool"


def test_the_schema_reads_and_writes_the_openai_mapping():
    schema = ToolSchema.from_dict(LOOKUP_TOOL_SCHEMA)
    assert OpenAIFunctionToolSchema is ToolSchema
    assert schema.function.name == "lookup" and schema.model_dump() == LOOKUP_TOOL_SCHEMA
    with pytest.raises(ValueError, match="function.name"):
        ToolSchema.from_dict({"type": "function", "function": {"description": "no name"}})
    with pytest.raises(ValueError, match="'function'"):
        ToolSchema.from_dict({"type": "function"})


def test_the_built_in_tools_in_process():
    async def run() -> list:
        gsm8k = Gsm8kTool({}, ToolSchema.from_dict(VERL_GSM8K_SCHEMA))
        iid, _ = await gsm8k.create(create_kwargs={"ground_truth": "72"})
        wrong = await gsm8k.execute(iid, {"answer": 71})
        right = await gsm8k.execute(iid, {"answer": "#### 72"})
        again = await gsm8k.execute(iid, {"answer": "72"})
        score = await gsm8k.calc_reward(iid)
        await gsm8k.release(iid)
        direct, _ = await gsm8k.create("mine", ground_truth="5")
        lookup = LookupTool({}, ToolSchema.from_dict(LOOKUP_TOOL_SCHEMA))
        lid, _ = await lookup.create(create_kwargs={"value": "swordfish"})
        empty, _ = await lookup.create()
        base = BaseTool({}, ToolSchema.from_dict(LOOKUP_TOOL_SCHEMA))
        return [
            wrong,
            right,
            again,
            score,
            iid in gsm8k._instances,
            direct,
            await lookup.execute(lid, {}),
            await lookup.execute(empty, {}),
            (await base.create())[0] != (await base.create())[0],
            await base.calc_reward("x"),
        ]

    wrong, right, again, score, kept, direct, looked_up, empty, fresh_ids, base_reward = asyncio.run(run())
    assert wrong == (ToolResponse(text="Current parsed answer='71' reward=0.0"), -0.05, {})
    assert right == (ToolResponse(text="Current parsed answer='#### 72' reward=1.0"), 0.0, {})
    assert again == (ToolResponse(text="Current parsed answer='72' reward=1.0"), -0.05, {})  # no better
    assert score == 1.0 and not kept and direct == "mine"
    assert looked_up == (ToolResponse(text="swordfish"), 0.0, {}) and empty[0] == ToolResponse(text="")
    assert fresh_ids and base_reward == 0.0


VERL_GSM8K_SCHEMA = {"type": "function", "function": {"name": "calc_gsm8k_reward", "parameters": {}}}

GOOD = (
    "  - class_name: tests.tools.sample_tools.SampleTool\n    tool_schema: {type: function, function: {name: sample}}\n"
)


@pytest.mark.parametrize(
    "text,message",
    [
        (None, r"no such file; give the path of a verl-format tool YAML"),
        ("tools: [unclosed\n", r"not valid YAML \(.*\); fix its syntax"),
        ("something: else\n", r"no 'tools' list at the top; write tools: \["),
        ("tools: []\n", r"no 'tools' list at the top"),
        ("tools:\n  - tool_schema: {function: {name: x}}\n", r"tools\[0\]: no 'class_name'; every tool needs"),
        ("tools:\n  - class_name: a.B\n", r"tools\[0\]: no 'tool_schema'"),
        (
            "tools:\n  - class_name: a.B\n    tool_schema: {type: function, function: {description: d}}\n",
            r"tools\[0\]: the tool schema has no 'function.name' .*; add it under tool_schema",
        ),
        (
            "tools:\n" + GOOD + GOOD,
            r"tools\[1\] \(sample\): the name is also tools\[0\]'s; .* give each a different function.name",
        ),
        (
            "tools:\n" + GOOD + "    config: {type: mcp}\n",
            r"tools\[0\] \(sample\): config.type: mcp is not supported yet: MCP tools; use type native",
        ),
        (
            "tools:\n" + GOOD.replace("tests.tools.sample_tools.SampleTool", "no_such_package.Tool"),
            r"tools\[0\] \(sample\): class 'no_such_package.Tool' cannot be imported: importing module "
            r"'no_such_package' failed \(ModuleNotFoundError: .*\); it must be importable from the Python path",
        ),
        (
            "tools:\n" + GOOD.replace("SampleTool", "NoSuchTool"),
            r"module 'tests.tools.sample_tools' has no class 'NoSuchTool'; it must be importable from the Python",
        ),
        (
            "tools:\n" + GOOD.replace("tests.tools.sample_tools.SampleTool", "verl.tools.search_tool.SearchTool"),
            r"cannot be imported: .* verl's own tools other than \[.*gsm8k_tool.Gsm8kTool.*\] are not available: "
            r"port it to hybridrl.tools.base.BaseTool",
        ),
        (
            "tools:\n" + GOOD.replace("SampleTool", "SyncTool"),
            r"class 'tests.tools.sample_tools.SyncTool' has no async create, execute, release: subclass "
            r"hybridrl.tools.base.BaseTool",
        ),
    ],
    ids=[
        "missing-file",
        "not-yaml",
        "no-tools",
        "empty-tools",
        "no-class-name",
        "no-schema",
        "no-function-name",
        "duplicate-name",
        "mcp",
        "no-module",
        "no-class",
        "verl-unported",
        "not-async",
    ],
)
def test_each_mistake_is_one_line_naming_the_file_and_the_fix(tmp_path, text, message):
    path = str(tmp_path / "missing.yaml") if text is None else write(tmp_path, text)
    with pytest.raises(ValueError) as info:
        load_tool_config(path)
    error = str(info.value)
    assert "\n" not in error
    assert error.startswith(f"Tool config {path} (actor_rollout_ref.rollout.multi_turn.tool_config_path): ")
    assert re.search(message, error), error


def test_a_spec_is_plain_data():
    spec = ToolSpec("tests.tools.sample_tools.SampleTool", {"k": [1]}, dict(VERL_GSM8K_SCHEMA))
    assert spec.name == "calc_gsm8k_reward"
    assert {spec: 1}[ToolSpec("tests.tools.sample_tools.SampleTool", {"k": [1]}, dict(VERL_GSM8K_SCHEMA))] == 1
