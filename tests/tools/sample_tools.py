"""Tools for the tests, at module level: the tool processes import them by module path."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from hybridrl.tools.base import BaseTool, ToolResponse

SAMPLE_SCHEMA = {
    "type": "function",
    "function": {
        "name": "sample",
        "description": "Does what its argument 'do' says.",
        "parameters": {"type": "object", "properties": {"do": {"type": "string"}}, "required": ["do"]},
    },
}


class SampleTool(BaseTool):
    """Behaves, or misbehaves, as ``parameters["do"]`` says."""

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> Any:
        do = parameters.get("do", "echo")
        if do == "raise":
            raise KeyError("boom")
        if do == "hang":
            time.sleep(60)
        if do == "os_exit":
            os._exit(3)
        if do == "sys_exit":
            sys.exit(4)
        if do == "big":
            return ToolResponse(text="x" * 10_000_000), 0.0, {}
        if do == "nan":
            return ToolResponse(text="nan"), float("nan"), {}
        if do == "bare_str":
            return "a bare string"
        if do == "dict":
            return {"text": "from a dict"}, 0.5, {"n": 1}
        return ToolResponse(text=f"echo {parameters.get('text', '')}"), 0.25, {"pid": os.getpid()}


class OldStyleTool(BaseTool):
    """Older verl tools: ``create`` returns the instance id alone, ``execute`` a string and a reward."""

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> str:  # type: ignore[override]
        self.value = kwargs["create_kwargs"]["value"]
        return "the-id"

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> Any:
        return f"{instance_id} {self.value}", 1.0, {}


class SyncTool:
    """Not a tool: its methods are not async."""

    def create(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return "id"

    def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> str:
        return ""

    def release(self, instance_id: str, **kwargs: Any) -> None:
        pass
