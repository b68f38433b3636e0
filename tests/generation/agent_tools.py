"""A tool for the agent-loop tests, at module level (the tool processes import it by module path): it
behaves as its row's ``create_kwargs["do"]`` says, so each row of one rollout can meet a different failure."""

from __future__ import annotations

import os
import time
from typing import Any

from hybridrl.tools.base import BaseTool, ToolResponse
from hybridrl.tools.interactions import BaseInteraction


class BehaviourTool(BaseTool):
    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        self.do = kwargs["create_kwargs"].get("do", "echo")
        return "instance", ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        if self.do == "raise":
            raise RuntimeError("the tool failed")
        if self.do == "hang":
            time.sleep(600)
        if self.do == "slow":
            time.sleep(3)
            return ToolResponse(text="99"), 0.0, {}
        if self.do == "exit":
            os._exit(3)
        if self.do == "big":
            return ToolResponse(text="7" * 10_000_000), 0.0, {}
        return ToolResponse(text="42"), 0.5, {}


class PatientUser(BaseInteraction):
    """A simulated user who answers each model turn with its ``reply`` and a score of the turn's number, and
    ends the conversation at the ``patience``-th answer."""

    async def generate_response(
        self, instance_id: str, messages: list[dict], **kwargs: Any
    ) -> tuple[bool, str, float, dict]:
        answers = sum(m["role"] == "assistant" for m in messages)
        return answers >= kwargs["patience"], kwargs["reply"], float(answers), {}
