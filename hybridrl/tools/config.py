"""verl's tool YAML, read and checked before the run starts.

The file (``actor_rollout_ref.rollout.multi_turn.tool_config_path``) lists the tools a model may call::

    tools:
      - class_name: "verl.tools.gsm8k_tool.Gsm8kTool"
        config: {type: native}
        tool_schema: {type: function, function: {name: calc_gsm8k_reward, description: "...", parameters: {...}}}

verl's built-in class names map to hybridrl's own tools (``VERL_TOOL_CLASSES``); any other class is imported
by its dotted path. Everything is checked here, at load, so a typo fails in seconds with one line that names
the file, the tool and the fix, not minutes later in a child process.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
from dataclasses import dataclass
from typing import Any

import yaml

from hybridrl.tools.base import BaseTool, ToolSchema

#: verl's built-in tool classes that hybridrl implements itself, under both of verl's module paths.
VERL_TOOL_CLASSES: dict[str, str] = {
    "verl.tools.gsm8k_tool.Gsm8kTool": "hybridrl.tools.gsm8k.Gsm8kTool",
    "verl.workers.tool.gsm8k_tool.Gsm8kTool": "hybridrl.tools.gsm8k.Gsm8kTool",
}

_LIFECYCLE = ("create", "execute", "release")


@dataclass(frozen=True)
class ToolSpec:
    """One tool of the YAML: the class to build (hybridrl's path when verl named a built-in), its ``config``
    and its OpenAI schema. Plain data, so it pickles to the tool processes."""

    class_name: str
    config: dict
    schema: dict

    @property
    def name(self) -> str:
        """The name the model calls the tool by."""
        return str(self.schema["function"]["name"])

    def tool_schema(self) -> ToolSchema:
        return ToolSchema.from_dict(self.schema)

    def __hash__(self) -> int:  # the dict fields are not hashable; their JSON is (a key for caches)
        return hash(self._key())

    def _key(self) -> str:
        return json.dumps([self.class_name, self.config, self.schema], sort_keys=True, default=repr)


def import_tool_class(class_name: str) -> type:
    """The class at ``class_name`` (dotted path); ImportError in words (the module or attribute that failed)."""
    module_name, _, attr = class_name.rpartition(".")
    if not module_name:
        raise ImportError(f"{class_name!r} is not a dotted path (package.module.Class)")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ImportError(f"importing module {module_name!r} failed ({type(exc).__name__}: {exc})") from None
    cls = getattr(module, attr, None)
    if not inspect.isclass(cls):
        raise ImportError(f"module {module_name!r} has no class {attr!r}")
    return cls


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def _check_class(class_name: str) -> str | None:
    """What is wrong with the class at ``class_name`` (and how to fix it), or None."""
    try:
        cls = import_tool_class(class_name)
    except ImportError as exc:
        problem = f"class {class_name!r} cannot be imported: {one_line(str(exc))}; it must be importable from the Python path (PYTHONPATH)"
        if class_name.startswith("verl."):
            problem += (
                f". verl's own tools other than {sorted(VERL_TOOL_CLASSES)} are not available: port it to "
                f"hybridrl.tools.base.BaseTool (change its imports) and name the ported class"
            )
        return problem
    missing = [m for m in _LIFECYCLE if not inspect.iscoroutinefunction(getattr(cls, m, None))]
    if missing:
        return (
            f"class {class_name!r} has no async {', '.join(missing)}: subclass hybridrl.tools.base.BaseTool and "
            f"define them with async def"
        )
    return None


def read_yaml_list(path: str, where: str, key: str, shape: str, kind: str) -> list:
    """The non-empty list under ``key`` at the top of verl's ``kind`` YAML file at ``path`` (tools,
    interactions); a missing file, bad YAML or no such list is a one-line ValueError starting with ``where``."""
    if not os.path.isfile(path):
        raise ValueError(f"{where}: no such file; give the path of a verl-format {kind} YAML.")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: not valid YAML ({one_line(str(exc))}); fix its syntax.") from None
    entries = data.get(key) if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{where}: no '{key}' list at the top; write {shape}.")
    return entries


def load_tool_config(path: str) -> list[ToolSpec]:
    """The tools of verl's tool YAML at ``path``, each checked (schema, class importable, async lifecycle);
    any problem is a one-line ValueError naming the file, the tool and the fix."""
    where = f"Tool config {path} (actor_rollout_ref.rollout.multi_turn.tool_config_path)"
    tools = read_yaml_list(
        path,
        where,
        "tools",
        "tools: [{class_name: ..., config: {type: native}, tool_schema: {type: function, function: {name: ..., ...}}}, ...]",
        "tool",
    )
    specs: list[ToolSpec] = []
    for index, entry in enumerate(tools):
        specs.append(_read_tool(where, index, entry))
        seen = [s.name for s in specs[:-1]]
        if specs[-1].name in seen:
            raise ValueError(
                f"{where}: tools[{index}] ({specs[-1].name}): the name is also tools[{seen.index(specs[-1].name)}]'s; "
                f"the model calls tools by name, so give each a different function.name."
            )
    return specs


def _read_tool(where: str, index: int, entry: Any) -> ToolSpec:
    at = f"{where}: tools[{index}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{at}: is {type(entry).__name__}, not a mapping; write {{class_name, config, tool_schema}}.")
    for key in ("class_name", "tool_schema"):
        if not entry.get(key):
            raise ValueError(f"{at}: no '{key}'; every tool needs class_name, config and tool_schema.")
    try:
        schema = ToolSchema.from_dict(entry["tool_schema"])
    except ValueError as exc:
        raise ValueError(f"{at}: {exc}; add it under tool_schema.") from None
    at = f"{at} ({schema.function.name})"
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{at}: config is {config!r}, not a mapping; write config: {{type: native}}.")
    kind = str(config.get("type", "native")).lower()
    if kind == "mcp":
        raise ValueError(f"{at}: config.type: mcp is not supported yet: MCP tools; use type native.")
    if kind != "native":
        raise ValueError(f"{at}: config.type: {kind} is unknown; use type native.")
    class_name = str(entry["class_name"]).strip()
    class_name = VERL_TOOL_CLASSES.get(class_name, class_name)
    problem = _check_class(class_name)
    if problem:
        raise ValueError(f"{at}: {problem}.")
    return ToolSpec(class_name=class_name, config=dict(config), schema=schema.model_dump())


def build_tool(spec: ToolSpec) -> BaseTool:
    """An instance of the spec's class, built as verl builds it (``cls(config=..., tool_schema=...)``)."""
    cls = import_tool_class(spec.class_name)
    return cls(config=spec.config, tool_schema=spec.tool_schema())
