"""verl's tool interface (``verl.tools.base_tool.BaseTool``, ``verl.tools.schemas``), without pydantic.

A verl tool ports by changing its imports only::

    from verl.tools.base_tool import BaseTool                                  # before
    from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
    from hybridrl.tools.base import BaseTool                                   # after
    from hybridrl.tools.base import OpenAIFunctionToolSchema, ToolResponse

The life of one call, as the agent loop drives it: ``create`` an instance (with the row's
``create_kwargs``), ``execute`` it with the arguments the model wrote, ``release`` it. Tools run in child
processes (hybridrl.tools.processes), so a tool that hangs or crashes costs one call, not the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4


@dataclass
class ToolResponse:
    """What a tool answers: text for the model (image and video are kept for verl's signature)."""

    text: str | None = None
    image: list | None = None
    video: list | None = None


@dataclass
class FunctionSchema:
    """The ``function`` part of an OpenAI tool schema: its name, what it does, its JSON-schema arguments."""

    name: str
    description: str = ""
    parameters: dict = field(default_factory=dict)


@dataclass(kw_only=True)
class ToolSchema:
    """An OpenAI function-tool schema, the form chat templates take as ``tools=``. Keyword-only, as the pydantic
    model it stands in for."""

    type: str = "function"
    function: FunctionSchema

    @classmethod
    def from_dict(cls, d: dict) -> ToolSchema:
        """Read ``{"type": "function", "function": {"name", "description", "parameters"}}``; a missing field is a
        ValueError that names it (the YAML's author has to add it)."""
        if not isinstance(d, dict):
            raise ValueError(f"a tool schema must be a mapping, got {type(d).__name__}")
        function = d.get("function")
        if not isinstance(function, dict):
            raise ValueError("the tool schema has no 'function' mapping (function: {name, description, parameters})")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("the tool schema has no 'function.name' (the name the model calls the tool by)")
        parameters = function.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise ValueError(f"the tool schema's 'function.parameters' must be a mapping, got {parameters!r}")
        return cls(
            type=str(d.get("type", "function")),
            function=FunctionSchema(
                name=name, description=str(function.get("description") or ""), parameters=dict(parameters)
            ),
        )

    def model_dump(self, exclude_unset: bool = False, exclude_none: bool = False) -> dict:
        """The OpenAI mapping. The keywords are pydantic's, accepted so verl-written code calling
        ``model_dump(exclude_unset=True, exclude_none=True)`` runs; every field is always set and never None."""
        return {
            "type": self.type,
            "function": {
                "name": self.function.name,
                "description": self.function.description,
                "parameters": self.function.parameters,
            },
        }


#: verl's name for ToolSchema, so ``from verl.tools.schemas import OpenAIFunctionToolSchema`` ports by
#: changing the module only.
OpenAIFunctionToolSchema = ToolSchema


class BaseTool:
    """verl's tool base class: subclass it and override ``execute`` (and ``create``/``release`` for state)."""

    def __init__(self, config: dict, tool_schema: ToolSchema) -> None:
        self.config = config
        self.tool_schema = tool_schema
        self.name = tool_schema.function.name

    def get_openai_tool_schema(self) -> ToolSchema:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Start an instance (one per call in hybridrl); returns its id and an (empty) response."""
        return (instance_id if instance_id is not None else str(uuid4())), ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        """Run the tool with the model's arguments: (the answer, a step reward, metrics)."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drop the instance's state."""
