"""verl's agent loops on a generating worker: ``single_turn_agent`` (one response) and ``tool_agent`` (the model
calls tools between its turns until it answers without a call, or a turn or token budget ends).

Each sample is a token list that only grows: the model's turns as the engine sampled them (with their
log-probs) and the tools' answers rendered by the tokenizer's chat template, so training sees exactly the
tokens that were generated and nothing is re-tokenized. ``response_mask`` is 1 on the model's tokens and 0 on
the tools' (in the context, never trained on); ``attention_mask`` covers both.

Samples run side by side, not in lock-step: a model turn is generated for every sample ready for one, while
tool calls run in child processes (``hybridrl.tools.processes``); a sample whose tool is slow joins a later
generation call and keeps no other sample waiting. Every model turn samples from a stream of its own
(``GenerationRequest.row_seeds``), so which samples share a call does not change what any of them samples.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hybridrl.config.choices import AgentLoopName, TruncateSide
from hybridrl.config.schema import MultiTurnConfig, SamplingConfig
from hybridrl.generation.engines.base import (
    GenerationRequest,
    RolloutEngine,
    joined_columns,
    prompt_token_lists,
)
from hybridrl.seeds import turn_seed
from hybridrl.tools.calls import FORMATS, ToolCall
from hybridrl.tools.config import ToolSpec
from hybridrl.tools.interactions import InteractionSpec
from hybridrl.tools.processes import ToolOutcome, ToolProcesses

logger = logging.getLogger(__name__)

HERMES_CALL_END = "</tool_call>"

#: What a chat template renders before the tools' answers; only the text after it is kept.
_CONTEXT = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "?"}]


@dataclass(frozen=True)
class AgentRow:
    """What a row brings to its rollout besides its prompt tokens: its agent loop (None = the default), its
    tools' ``create_kwargs`` (``extra_info.tools_kwargs``), its chat messages (``raw_prompt``: what an
    interaction reads) and its ``extra_info.interaction_kwargs`` (``name`` picks the interaction)."""

    agent: str | None = None
    tools_kwargs: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    interaction_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Sample:
    row: int
    agent: AgentLoopName
    prompt: list[int]
    tools_kwargs: dict[str, Any]
    messages: list[dict[str, Any]]  # the conversation as text, for an interaction
    interaction_kwargs: dict[str, Any]
    tokens: list[int] = field(default_factory=list)  # the response: model and tool tokens
    mask: list[int] = field(default_factory=list)  # 1 = the model's token
    log_probs: list[float] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_timeouts: int = 0
    tool_rewards: list[float] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)  # an interaction's score of each user turn
    waiting: dict[int, ToolOutcome | None] = field(default_factory=dict)  # call id -> outcome, in call order
    asking: bool = False  # the call waited for is the interaction's user turn


@dataclass(frozen=True)
class AgentStats:
    """Per sample: turns (verl's num_turns: model + tool turns + the prompt), tool calls, their errors and
    timeouts, the tools' step rewards, and the model's tokens per turn."""

    num_turns: list[int]
    tool_calls: list[int]
    tool_errors: list[int]
    tool_timeouts: list[int]
    tool_rewards: list[float]
    tokens_per_turn: list[float]
    turn_scores: list[list[float]] = field(default_factory=list)

    def columns(self) -> dict[str, list]:
        return {
            "turn_scores": self.turn_scores,
            "num_turns": self.num_turns,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "tool_timeouts": self.tool_timeouts,
            "tool_rewards": self.tool_rewards,
            "tokens_per_turn": self.tokens_per_turn,
        }


def truncate_tool_text(text: str, limit: int, side: TruncateSide) -> str:
    """verl's cut of a long tool answer: ``left`` keeps the start, ``right`` the end, ``middle`` both ends."""
    if len(text) <= limit:
        return text
    if side == TruncateSide.left:
        return text[:limit] + "...(truncated)"
    if side == TruncateSide.right:
        return "(truncated)..." + text[-limit:]
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


class AgentLoop:
    def __init__(
        self,
        cfg: MultiTurnConfig,
        tools: Sequence[ToolSpec],
        engine: RolloutEngine,
        tokenizer: Any,
        *,
        max_response_length: int,
        pad_token_id: int,
        default_agent: AgentLoopName = AgentLoopName.single_turn_agent,
        turn_by_turn: bool = False,
        interactions: Sequence[InteractionSpec] = (),
    ) -> None:
        """``turn_by_turn`` (``rollout.mode=sync``): every model turn waits until all tool calls of the turn
        before have answered, so which samples share a generation call, and with it every float, repeats run to
        run; otherwise (async) a sample goes on as soon as its own tools answered."""
        check_agent_tokenizer(cfg, tokenizer)
        self.cfg = cfg
        self.engine = engine
        self.tokenizer = tokenizer
        self.max_response_length = max_response_length
        self.pad_token_id = pad_token_id
        self.default_agent = default_agent
        self.turn_by_turn = turn_by_turn
        self.parse = FORMATS[str(cfg.format)]
        self.interactions = {spec.name: spec for spec in interactions}
        self.processes = ToolProcesses(
            list(tools), cfg.tool_num_workers, cfg.tool_timeout_s, cfg.tool_max_response_bytes
        )
        self._context_text = tokenizer.apply_chat_template(_CONTEXT, tokenize=False)
        self.stop_token_ids = call_end_tokens(tokenizer) if cfg.stop_after_tool_call else ()
        self._next_call = 0

    def close(self) -> None:
        self.processes.close()

    # -- the loop ----------------------------------------------------------------------------------
    def run(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        rows: Sequence[AgentRow],
        sampling: SamplingConfig,
        seed: int,
    ) -> tuple[dict[str, torch.Tensor], AgentStats]:
        """Roll out every row (left-padded prompts (B, P)) to the end of its conversation; the trainer's
        columns, right-padded to ``max_response_length``, and the per-sample statistics."""
        prompts = prompt_token_lists(input_ids.cpu(), attention_mask.cpu())
        samples = [
            _Sample(
                i,
                AgentLoopName(row.agent or self.default_agent),
                prompt,
                dict(row.tools_kwargs or {}),
                list(row.messages or []),
                dict(row.interaction_kwargs or {}),
            )
            for i, (prompt, row) in enumerate(zip(prompts, rows, strict=True))
        ]
        by_call: dict[int, _Sample] = {}
        ready = list(samples)
        while ready or by_call:
            if ready and not (self.turn_by_turn and by_call):
                started = time.monotonic()
                self._model_turn(ready, sampling, seed, by_call)
                ready = []
                took = time.monotonic() - started
                finished = self._answers_within(time.monotonic() + took)
            else:
                finished = self.processes.collect(block=True)
            for call_id, outcome in finished:
                sample = by_call.pop(call_id)
                sample.waiting[call_id] = outcome
                if all(o is not None for o in sample.waiting.values()) and self._answered(sample):
                    ready.append(sample)
            ready.sort(key=lambda s: s.row)
        return self._columns(samples, input_ids, attention_mask), _stats(samples)

    def _answers_within(self, until: float) -> list[tuple[int, ToolOutcome]]:
        """The tool answers that arrive until the monotonic time ``until`` (async mode: one model turn's time
        after the calls were made), so that fast tools' samples share the next generation call while a slower
        tool holds no other sample longer than that."""
        finished = self.processes.collect(block=False)
        while self.processes.pending() and time.monotonic() < until:
            finished += self.processes.collect(block=True, until=until)
        return finished

    def _model_turn(
        self, samples: list[_Sample], sampling: SamplingConfig, seed: int, by_call: dict[int, _Sample]
    ) -> None:
        """One model turn for each of ``samples`` (one engine call), then their tool calls started."""
        room = [self.max_response_length - len(s.tokens) for s in samples]
        contexts = [s.prompt + s.tokens for s in samples]
        width = max(len(c) for c in contexts)
        ids = torch.full((len(samples), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(samples), width), dtype=torch.long)
        for i, context in enumerate(contexts):
            ids[i, width - len(context) :] = torch.tensor(context)
            mask[i, width - len(context) :] = 1
        request = GenerationRequest(
            ids,
            mask,
            max_new_tokens=max(room),
            sampling=sampling,
            seed=seed,
            row_seeds=tuple(turn_seed(seed, s.row, s.assistant_turns) for s in samples),
            stop_token_ids=self.stop_token_ids,
        )
        out = self.engine.generate(request)
        lengths = out["response_mask"].sum(-1).tolist()
        for i, sample in enumerate(samples):
            n = min(int(lengths[i]), room[i])
            turn = out["responses"][i, :n].tolist()
            sample.tokens += turn
            sample.mask += [1] * n
            sample.log_probs += out["rollout_log_probs"][i, :n].tolist()
            sample.assistant_turns += 1
            interaction = self.interactions.get(str(sample.interaction_kwargs.get("name")))
            if interaction is not None:  # the conversation as text is for the simulated user only
                sample.messages.append(
                    {"role": "assistant", "content": self.tokenizer.decode(turn, skip_special_tokens=True)}
                )
            if not self._goes_on(sample):
                continue
            calls = self._calls(sample, turn)
            for call in calls:
                create_kwargs = dict((sample.tools_kwargs.get(call.name) or {}).get("create_kwargs") or {})
                self.processes.submit(self._wait(sample, by_call), call, create_kwargs)
            if not calls and interaction is not None:  # no tool call: the simulated user answers (verl's order)
                sample.asking = True
                call_id = self._wait(sample, by_call)
                self.processes.submit_user_turn(call_id, interaction, sample.interaction_kwargs, list(sample.messages))

    def _wait(self, sample: _Sample, by_call: dict[int, _Sample]) -> int:
        """A new call id, whose outcome ``sample`` waits for."""
        call_id = self._next_call
        self._next_call += 1
        sample.waiting[call_id] = None
        by_call[call_id] = sample
        return call_id

    def _goes_on(self, sample: _Sample) -> bool:
        """Whether the conversation goes on after the model's last turn: a tool agent within its budgets."""
        cfg = self.cfg
        return not (
            sample.agent == AgentLoopName.single_turn_agent
            or len(sample.tokens) >= self.max_response_length
            or (cfg.max_assistant_turns is not None and sample.assistant_turns >= cfg.max_assistant_turns)
            or (cfg.max_user_turns is not None and sample.user_turns >= cfg.max_user_turns)
        )

    def _calls(self, sample: _Sample, turn: list[int]) -> list[ToolCall]:
        """The tool calls of the model's last turn that run (at most ``max_parallel_calls``)."""
        calls = self.parse(self.tokenizer.decode(turn, skip_special_tokens=False))[: self.cfg.max_parallel_calls]
        sample.tool_calls += len(calls)
        return calls

    def _answered(self, sample: _Sample) -> bool:
        """The answers ``sample`` waited for join its context (mask 0): the tools', or the simulated user's.
        False where the conversation ends here: the answers would not fit (as in verl), the user ends it, or
        the user's turn failed."""
        outcomes = [o for o in sample.waiting.values() if o is not None]
        sample.waiting = {}
        if sample.asking:
            sample.asking = False
            (outcome,) = outcomes
            if outcome.error is not None:
                sample.tool_errors += 1
                sample.tool_timeouts += outcome.timed_out
                return False
            sample.turn_scores.append(outcome.reward)
            return self._append(sample, [{"role": "user", "content": outcome.text}]) and not outcome.terminate
        messages = []
        for outcome in outcomes:
            if outcome.error is not None:
                sample.tool_errors += 1
                sample.tool_timeouts += outcome.timed_out
            else:
                sample.tool_rewards.append(outcome.reward)
            text = truncate_tool_text(
                outcome.text, self.cfg.max_tool_response_length, self.cfg.tool_response_truncate_side
            )
            messages.append({"role": "tool", "content": text})
        return self._append(sample, messages)

    def _append(self, sample: _Sample, messages: list[dict[str, Any]]) -> bool:
        """``messages`` (tools' or the user's) rendered into the sample's context, untrained; False where they
        would not fit."""
        sample.messages += messages
        ids = self._render(messages)
        if len(sample.tokens) + len(ids) >= self.max_response_length:
            return False
        sample.tokens += ids
        sample.mask += [0] * len(ids)
        sample.log_probs += [0.0] * len(ids)
        sample.user_turns += 1
        return True

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        """The tokens of ``messages`` and the next assistant header, as the chat template writes them after a
        model turn."""
        text = self.tokenizer.apply_chat_template(_CONTEXT + messages, add_generation_prompt=True, tokenize=False)
        if not text.startswith(self._context_text):
            raise ValueError(
                "The tokenizer's chat template renders a conversation's start differently once tool messages "
                "follow, so the tools' answers cannot be appended to the generated tokens; use a chat template "
                "that renders earlier messages the same way (as Qwen's and Llama's do)."
            )
        return self.tokenizer.encode(text[len(self._context_text) :], add_special_tokens=False)

    # -- the trainer's columns ---------------------------------------------------------------------
    def _columns(
        self, samples: list[_Sample], input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        width = self.max_response_length
        responses = torch.full((len(samples), width), self.pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((len(samples), width), dtype=torch.long)
        context_mask = torch.zeros((len(samples), width), dtype=attention_mask.dtype)
        log_probs = torch.zeros((len(samples), width), dtype=torch.float32)
        for s in samples:
            n = min(len(s.tokens), width)
            responses[s.row, :n] = torch.tensor(s.tokens[:n], dtype=torch.long)
            response_mask[s.row, :n] = torch.tensor(s.mask[:n], dtype=torch.long)
            context_mask[s.row, :n] = 1
            log_probs[s.row, :n] = torch.tensor(s.log_probs[:n], dtype=torch.float32)
        return joined_columns(input_ids, attention_mask, responses, response_mask, context_mask, log_probs)


def check_agent_tokenizer(cfg: MultiTurnConfig, tokenizer: Any) -> None:
    """What multi-turn rollouts need of the tokenizer, checked in the driver before Ray starts too: a chat
    template (it renders the tools' answers) and, with ``stop_after_tool_call``, a token that ends a call."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "actor_rollout_ref.rollout.multi_turn.enable=true needs a tokenizer with a chat template (it renders "
            "the tools' answers): give a model whose tokenizer_config.json has one."
        )
    if cfg.stop_after_tool_call:
        call_end_tokens(tokenizer)


def call_end_tokens(tokenizer: Any) -> tuple[int, ...]:
    """The tokens that end a hermes tool call: the tokenizer's added tokens whose text ends with
    ``</tool_call>`` (Qwen's ``</tool_call>``; the built-in tokenizer's one-word call)."""
    ids = tuple(sorted(i for text, i in tokenizer.get_added_vocab().items() if text.endswith(HERMES_CALL_END)))
    if not ids:
        raise ValueError(
            f"actor_rollout_ref.rollout.multi_turn.stop_after_tool_call=true needs {HERMES_CALL_END} to be one "
            f"token of the tokenizer (it is in Qwen's): set it to false, and the model ends its turns itself."
        )
    return ids


def _stats(samples: list[_Sample]) -> AgentStats:
    return AgentStats(
        num_turns=[s.assistant_turns + s.user_turns + 1 for s in samples],
        tool_calls=[s.tool_calls for s in samples],
        tool_errors=[s.tool_errors for s in samples],
        tool_timeouts=[s.tool_timeouts for s in samples],
        tool_rewards=[float(sum(s.tool_rewards)) for s in samples],
        tokens_per_turn=[sum(s.mask) / max(s.assistant_turns, 1) for s in samples],
        turn_scores=[list(s.turn_scores) for s in samples],
    )
