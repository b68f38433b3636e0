"""verl's interactions: a simulated user who answers the model's turns (``multi_turn.interaction_config_path``).

The file lists the interactions a row may name (its ``extra_info.interaction_kwargs.name``)::

    interaction:
      - name: "gsm8k"
        class_name: "verl.interactions.gsm8k_interaction.Gsm8kInteraction"
        config: {}

An interaction is user code, as a tool is: each of its turns runs in the tool processes with the tools'
deadline (``tool_processes.run_interaction_turn``). A turn starts the interaction for the sample with the
row's ``interaction_kwargs``, asks it to answer the conversation so far (``generate_response``), and finalizes
it, all in one message, so no process holds a sample's state between turns: an interaction reads what it needs
from the conversation (verl's gsm8k one reads the model's last answer) and keeps nothing in the object from one
turn to the next.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from hybridrl.rewards.gsm8k import compute_score as gsm8k_score
from hybridrl.tools.config import import_tool_class, one_line, read_yaml_list

#: verl's built-in interaction classes that hybridrl implements itself.
VERL_INTERACTION_CLASSES: dict[str, str] = {
    "verl.interactions.gsm8k_interaction.Gsm8kInteraction": "hybridrl.tools.interactions.Gsm8kInteraction",
}

_LIFECYCLE = ("start_interaction", "generate_response", "finalize_interaction")


class BaseInteraction:
    """verl's interaction interface: ``start_interaction`` per sample, ``generate_response`` per user turn
    (whether to end the conversation, the user's message, the turn's score, extra data), ``finalize_interaction``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.name: str = config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        return instance_id if instance_id is not None else str(uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        return False, "Your current result seems acceptable.", 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        return None


class Gsm8kInteraction(BaseInteraction):
    """verl's GSM8K user: says whether the model's last answer is right (score 1 and the end) or asks it to
    try again (score 0)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> str:
        instance_id = instance_id if instance_id is not None else str(uuid4())
        self._instances[instance_id] = {"response": "", "ground_truth": ground_truth}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        answer = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "assistant"), "")
        self._instances[instance_id]["response"] = answer
        score = await self.calculate_score(instance_id)
        if score == 1.0:
            return True, "Your response is correct!", score, {}
        return False, "Your response is incorrect! You need to reflect on your answer and try again.", score, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instances[instance_id]
        return float(gsm8k_score(state["response"], state["ground_truth"], method="strict"))

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


@dataclass(frozen=True)
class InteractionSpec:
    """One interaction of the YAML: the name rows pick it by, the class (hybridrl's where verl named a built-in)
    and its ``config``. Plain data, so it pickles to the tool processes."""

    name: str
    class_name: str
    config: dict

    def __hash__(self) -> int:  # the config dict is not hashable; its JSON is (a key for caches)
        return hash(json.dumps([self.name, self.class_name, self.config], sort_keys=True, default=repr))


def build_interaction(spec: InteractionSpec) -> BaseInteraction:
    """An instance of the spec's class, built as verl builds it (its config, with the name)."""
    cls = import_tool_class(spec.class_name)
    return cls({**spec.config, "name": spec.name})


def load_interaction_config(path: str) -> list[InteractionSpec]:
    """The interactions of verl's interaction YAML at ``path``; any problem is a one-line ValueError naming the
    file, the entry and the fix."""
    where = f"Interaction config {path} (actor_rollout_ref.rollout.multi_turn.interaction_config_path)"
    entries = read_yaml_list(
        path, where, "interaction", "interaction: [{name: ..., class_name: ..., config: {}}]", "interaction"
    )
    specs: list[InteractionSpec] = []
    for index, entry in enumerate(entries):
        spec = _read_interaction(where, index, entry)
        if spec.name in {s.name for s in specs}:
            raise ValueError(f"{where}: interaction[{index}]: the name {spec.name!r} is used twice; rows pick by name.")
        specs.append(spec)
    return specs


def _read_interaction(where: str, index: int, entry: Any) -> InteractionSpec:
    at = f"{where}: interaction[{index}]"
    if not isinstance(entry, dict) or not entry.get("class_name"):
        raise ValueError(f"{at}: needs a class_name (and a name and config); write {{name, class_name, config}}.")
    class_name = str(entry["class_name"]).strip()
    class_name = VERL_INTERACTION_CLASSES.get(class_name, class_name)
    simple = class_name.rsplit(".", 1)[-1]
    name = str(
        entry.get("name") or (simple[: -len("Interaction")] if simple.endswith("Interaction") else simple).lower()
    )
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{at} ({name}): config is {config!r}, not a mapping.")
    try:
        cls = import_tool_class(class_name)
    except ImportError as exc:
        raise ValueError(
            f"{at} ({name}): class {class_name!r} cannot be imported: {one_line(str(exc))}; it must be importable "
            f"from the Python path (verl's own interactions other than {sorted(VERL_INTERACTION_CLASSES)} are not "
            f"available: port it to hybridrl.tools.interactions.BaseInteraction)."
        ) from None
    missing = [m for m in _LIFECYCLE if not inspect.iscoroutinefunction(getattr(cls, m, None))]
    if missing:
        raise ValueError(
            f"{at} ({name}): class {class_name!r} has no async {', '.join(missing)}: subclass "
            f"hybridrl.tools.interactions.BaseInteraction."
        )
    return InteractionSpec(name=name, class_name=class_name, config=dict(config))
