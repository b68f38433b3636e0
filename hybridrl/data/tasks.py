"""Built-in verifiable tasks: prompts a tiny model can learn to answer by RL alone.

Each task makes prompt strings with a ground truth and is scored by the reward function registered
under the same name (the row's ``data_source``, as in verl). Prompts are made from a seed, so the
training and held-out sets are the same on every run and every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TASKS: dict[str, type[Task]] = {}


def register_task(name: str):
    def wrap(cls):
        TASKS[name] = cls
        return cls

    return wrap


def make_task(name: str, **kwargs) -> Task:
    if name not in TASKS:
        raise ValueError(f"Unknown task '{name}'; valid tasks: {sorted(TASKS)}.")
    try:
        return TASKS[name](**kwargs)
    except TypeError as exc:
        raise ValueError(f"Bad data.task_kwargs for task '{name}': {exc}") from None


@dataclass(frozen=True)
class Example:
    prompt: str
    ground_truth: str
    data_source: str
    extra_info: dict | None = None
    ability: str | None = None
    agent_name: str | None = None  # the row's agent loop (multi-turn rollouts); None = the configured default
    messages: list[dict] | None = None  # the chat messages the prompt was templated from (parquet rows)


class Task:
    name: str = ""
    #: Words the built-in tokenizer adds for this task (hybridrl/models/tiny.py); none for plain text tasks.
    tokens: tuple[str, ...] = ()

    def example(self, rng: random.Random) -> Example:
        raise NotImplementedError

    def examples(self, count: int, seed: int) -> list[Example]:
        rng = random.Random(seed)
        return [self.example(rng) for _ in range(count)]

    def prompt_length(self) -> int:
        """Characters (= tokens for the built-in tokenizer) in every prompt."""
        raise NotImplementedError


class DigitsTask(Task):
    """A task about a random string of ``num_digits`` digits (the built-in tasks' ``data.task_kwargs``)."""

    def __init__(self, num_digits: int = 3) -> None:
        if num_digits < 1:
            raise ValueError(f"num_digits={num_digits} must be at least 1")
        self.num_digits = num_digits

    def digits(self, rng: random.Random) -> str:
        return "".join(rng.choice("0123456789") for _ in range(self.num_digits))


@register_task("copy")
class CopyTask(DigitsTask):
    """Prompt ``"314="``; the answer repeats the digits: ``"314"``.

    Reward is the fraction of the first ``num_digits`` response characters that equal the prompt's
    digit at the same position, so no constant response scores above ~0.1 on average.
    """

    name = "copy"

    def example(self, rng: random.Random) -> Example:
        digits = self.digits(rng)
        return Example(prompt=digits + "=", ground_truth=digits, data_source=self.name)

    def prompt_length(self) -> int:
        return self.num_digits + 1


@register_task("reverse")
class ReverseTask(CopyTask):
    """Prompt ``"314="``; the answer is the digits reversed: ``"413"``."""

    name = "reverse"

    def example(self, rng: random.Random) -> Example:
        ex = super().example(rng)
        return Example(prompt=ex.prompt, ground_truth=ex.ground_truth[::-1], data_source=self.name)


#: The lookup task's one call, written in the hermes format (``<tool_call>{json}</tool_call>``).
LOOKUP_CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'


@register_task("lookup")
class LookupTask(DigitsTask):
    """Prompt ``"?="``; the answer is a secret of ``num_digits`` digits that only the ``lookup`` tool knows
    (each row's ``extra_info.tools_kwargs.lookup.create_kwargs.value``, as verl's tool datasets carry it), so a
    model scores above chance only by calling the tool and copying its answer. Scored like copy on the text
    after the last tool answer.

    The built-in tokenizer spells the whole call as one word, as a tokenizer trained on tool-calling text
    merges its frequent spellings: a model starting from random weights writes it by chance often enough
    for RL to find it. The call is still parsed from the decoded text as any hermes call is.
    """

    name = "lookup"
    tokens = (LOOKUP_CALL, "<tool_response>", "</tool_response>", "?")

    def example(self, rng: random.Random) -> Example:
        secret = self.digits(rng)
        return Example(
            prompt="?=",
            ground_truth=secret,
            data_source=self.name,
            extra_info={"tools_kwargs": {"lookup": {"create_kwargs": {"value": secret}}}},
            agent_name="tool_agent",
        )

    def prompt_length(self) -> int:
        return 2
