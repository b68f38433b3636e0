"""A built-in tool for tool-calling tasks whose answer the model can only get by calling it.

Each row stores a secret in ``create_kwargs: {value: ...}``; the tool returns it. A model that learns to call
the tool (and use its answer) is rewarded; one that guesses is not. Small enough to test the whole
multi-turn loop end to end.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.tools.base import BaseTool, ToolResponse, ToolSchema

#: The OpenAI schema of the lookup tool (for a tool YAML's tool_schema, or ``ToolSchema.from_dict``).
LOOKUP_TOOL_SCHEMA: dict = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Returns the secret value of this question.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}


class LookupTool(BaseTool):
    """Answers with the row's ``create_kwargs["value"]`` (a string; "" when the row has none)."""

    def __init__(self, config: dict, tool_schema: ToolSchema) -> None:
        super().__init__(config, tool_schema)
        self._values: dict[str, str] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        if instance_id is None:
            instance_id = str(uuid4())
        value = (kwargs.get("create_kwargs") or {}).get("value")
        self._values[instance_id] = "" if value is None else str(value)
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        return ToolResponse(text=self._values[instance_id]), 0.0, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._values.pop(instance_id, None)
