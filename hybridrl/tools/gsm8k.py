"""verl's demo tool (``verl.tools.gsm8k_tool.Gsm8kTool``), written for hybridrl.

The model submits its answer through the tool and hears back how it scored, so it can try again. The score
is hybridrl's GSM8K reward with the flexible method (the last number in ``"#### " + answer``), verl's choice;
the step reward is 0.0 when an answer improves on the instance's previous score and -0.05 otherwise, which
penalises resubmitting without getting better.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from hybridrl.rewards.gsm8k import compute_score
from hybridrl.tools.base import BaseTool, ToolResponse, ToolSchema


class Gsm8kTool(BaseTool):
    """Scores a GSM8K answer against the row's ground truth (``create_kwargs: {ground_truth: ...}``)."""

    def __init__(self, config: dict, tool_schema: ToolSchema) -> None:
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """verl's agent loop passes the row's ``create_kwargs``; a direct caller may pass ``ground_truth``."""
        if instance_id is None:
            instance_id = str(uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._instances[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict, **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        answer = parameters.get("answer", "")
        if not isinstance(answer, str):
            answer = str(answer)
        instance = self._instances[instance_id]
        instance["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > instance["reward"] else -0.05
        instance["reward"] = reward
        return ToolResponse(text=f"Current parsed answer={answer!r} reward={reward}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        instance = self._instances[instance_id]
        return compute_score(instance["response"], instance["ground_truth"], method="flexible")

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)
