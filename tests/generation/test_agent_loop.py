"""The tool agent loop on the tiny model and the hf engine: the trainer gets exactly the tokens generated,
tools' tokens stay in the context without loss, samples do not depend on their neighbours, and a tool that
fails in any way is an error message in the conversation, never a failed rollout."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hybridrl.algorithms.losses import compute_kl_loss, compute_policy_loss
from hybridrl.config.choices import TruncateSide
from hybridrl.config.schema import MultiTurnConfig, SamplingConfig
from hybridrl.data.dataset import PromptDataset
from hybridrl.data.tasks import Example, LookupTask
from hybridrl.generation.agent_loop import AgentLoop, AgentStats, truncate_tool_text
from hybridrl.generation.engines.base import GenerationRequest, RolloutEngine
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.generation.generation import AGENT_ROW, generation_inputs
from hybridrl.tools.config import load_tool_config
from hybridrl.tools.interactions import load_interaction_config
from tests.tiny_models import tiny

SAMPLING = SamplingConfig(do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
LOOKUP_TOOLS = Path(__file__).parents[2] / "examples" / "tools" / "lookup_tool_config.yaml"
RESPONSE = 16


class RecordingEngine(HFRolloutEngine):
    """The hf engine, keeping what each call was given and what it returned."""

    calls: list[tuple[GenerationRequest, dict[str, torch.Tensor]]]

    def generate(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        out = super().generate(request)
        self.calls.append((request, out))
        return out


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny(tmp_path_factory.mktemp("lookup_model"), extra_tokens=LookupTask.tokens)


def run_agent_loop(
    engine: RolloutEngine,
    tokenizer: Any,
    tools: Path,
    examples: list[Example],
    turn_by_turn: bool = False,
    interactions: Path | None = None,
    response_length: int = RESPONSE,
    **multi_turn: Any,
) -> tuple[dict[str, torch.Tensor], AgentStats]:
    """``examples`` rolled out by the agent loop on ``engine`` (the tools of ``tools``, calls ending a turn;
    the simulated users of ``interactions``)."""
    batch = PromptDataset(examples, tokenizer, 8).collate(list(range(len(examples))))
    cfg = MultiTurnConfig(enable=True, tool_config_path=str(tools), stop_after_tool_call=True, **multi_turn)
    loop = AgentLoop(
        cfg,
        load_tool_config(str(tools)),
        engine,
        tokenizer,
        max_response_length=response_length,
        pad_token_id=0,
        turn_by_turn=turn_by_turn,
        interactions=load_interaction_config(str(interactions)) if interactions else (),
    )
    gen_in = generation_inputs(batch, multi_turn=True)  # as the trainer sends the generating workers
    rows = list(gen_in.non_tensors[AGENT_ROW])
    try:
        return loop.run(gen_in.tensors["input_ids"], gen_in.tensors["attention_mask"], rows, SAMPLING, seed=5)
    finally:
        loop.close()


def rollout(model_dir: str, tools: Path, examples: list[Example], **options: Any):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    engine = RecordingEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine.calls = []
    out, stats = run_agent_loop(engine, tokenizer, tools, examples, **options)
    return out, stats, engine, tokenizer


def test_training_tokens_are_the_generated_tokens_and_tools_carry_no_loss(model_dir: str) -> None:
    examples = LookupTask().examples(24, seed=0)
    out, stats, engine, tokenizer = rollout(model_dir, LOOKUP_TOOLS, examples)
    assert sum(stats.tool_calls) >= 3 and max(stats.num_turns) >= 4, "the random model calls the tool sometimes"
    ids, mask, responses = out["input_ids"], out["attention_mask"], out["responses"]
    prompt_width = out["prompts"].shape[1]
    # What the model saw at every turn is a prefix of what the trainer trains on, and its answer follows.
    trained = [ids[r][mask[r].bool()].tolist() for r in range(ids.shape[0])]
    for request, turn in engine.calls:
        for i in range(request.input_ids.shape[0]):
            context = request.input_ids[i][request.attention_mask[i].bool()].tolist()
            generated = turn["responses"][i][turn["response_mask"][i].bool()].tolist()
            seen = context + generated
            assert any(full[: len(seen)] == seen[: len(full)] for full in trained), (context, generated)
    # The tools' answers are in the context (attention) but not trained on (response mask, log-probs): where
    # the mask is 0 inside a trajectory stand the lookup tool's answers, its secret as the template renders it.
    context, trained_on = mask[:, prompt_width:].bool(), out["response_mask"].bool()
    tool_rows = [r for r in range(len(examples)) if (context[r] & ~trained_on[r]).any()]
    assert tool_rows == [r for r in range(len(examples)) if stats.num_turns[r] >= 3]
    for r in tool_rows:
        answer = tokenizer.encode(
            f"<tool_response>{examples[r].ground_truth}</tool_response>", add_special_tokens=False
        )
        tool_tokens = responses[r][context[r] & ~trained_on[r]].tolist()
        assert tool_tokens == answer * (len(tool_tokens) // len(answer)), r
    assert (out["rollout_log_probs"][~trained_on] == 0).all()
    # The trainer's log-probs of the trajectory equal the engine's where the model sampled.
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=out["position_ids"]).logits
    scored = torch.log_softmax(logits[:, prompt_width - 1 : -1].float(), -1).gather(-1, responses[..., None])[..., 0]
    model_tokens = trained_on
    torch.testing.assert_close(scored[model_tokens], out["rollout_log_probs"][model_tokens], atol=1e-4, rtol=0)
    # Loss and KL move only with the model's tokens.
    old, adv, ref = out["rollout_log_probs"], torch.randn(responses.shape), torch.randn(responses.shape)
    shifted = old + 0.5 * (out["response_mask"] == 0) * (responses != 0)
    for new in (old.clone().requires_grad_(), shifted.clone().requires_grad_()):
        loss = compute_policy_loss(old, new, adv, out["response_mask"])["pg_loss"]
        kl = compute_kl_loss(new, ref, out["response_mask"], "low_var_kl")
        (loss + kl).backward()
        assert (new.grad[~model_tokens] == 0).all()
    base = compute_policy_loss(old, old, adv, out["response_mask"])["pg_loss"]
    assert torch.equal(base, compute_policy_loss(old, shifted, adv, out["response_mask"])["pg_loss"])


def test_a_sample_samples_the_same_whatever_samples_share_its_calls(model_dir: str) -> None:
    examples = LookupTask().examples(12, seed=1)
    everything, _, _, _ = rollout(model_dir, LOOKUP_TOOLS, examples)
    alone, _, _, _ = rollout(model_dir, LOOKUP_TOOLS, examples[:5])
    assert torch.equal(alone["responses"], everything["responses"][:5])
    assert torch.equal(alone["response_mask"], everything["response_mask"][:5])


BEHAVIOURS = ["raise", "hang", "exit", "big", "echo"]


def behaviour_tools(tmp_path: Path) -> Path:
    """A tool YAML naming the test tool under the lookup task's name (the tiny tokenizer's one-word call)."""
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        textwrap.dedent(
            """
            tools:
              - class_name: tests.generation.agent_tools.BehaviourTool
                config: {type: native}
                tool_schema: {type: function, function: {name: lookup, parameters: {type: object, properties: {}}}}
            """
        )
    )
    return tools


def behaving(do: str) -> Example:
    """A lookup row whose tool does what ``do`` says."""
    kwargs = {"tools_kwargs": {"lookup": {"create_kwargs": {"do": do}}}}
    return Example("?=", "1", "lookup", kwargs, agent_name="tool_agent")


def test_a_failing_tool_is_an_error_message_and_the_rollout_goes_on(
    model_dir: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tools = behaviour_tools(tmp_path)
    examples = [behaving(do) for _ in range(8) for do in BEHAVIOURS]
    with caplog.at_level(logging.WARNING, logger="hybridrl.tools.processes"):
        out, stats, _, _ = rollout(
            model_dir, tools, examples, tool_timeout_s=2.0, max_assistant_turns=2, max_tool_response_length=64
        )
    called = {
        do: [
            i
            for i, e in enumerate(examples)
            if e.extra_info["tools_kwargs"]["lookup"]["create_kwargs"]["do"] == do and stats.tool_calls[i]
        ]
        for do in BEHAVIOURS
    }
    assert all(called.values()), f"every behaviour met at least once: {called}"
    for do, rows in called.items():
        for i in rows:
            assert stats.tool_errors[i] == (0 if do == "echo" else stats.tool_calls[i]), (do, i)
            assert stats.tool_timeouts[i] == (stats.tool_calls[i] if do == "hang" else 0), (do, i)
    failed = sum(stats.tool_errors)
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == failed
    assert out["responses"].shape == (len(examples), RESPONSE)


def test_long_tool_answers_are_cut_as_verl_cuts_them() -> None:
    text = "abcdefghij"
    assert truncate_tool_text(text, 20, TruncateSide.middle) == text
    assert truncate_tool_text(text, 4, TruncateSide.left) == "abcd...(truncated)"
    assert truncate_tool_text(text, 4, TruncateSide.right) == "(truncated)...ghij"
    assert truncate_tool_text(text, 4, TruncateSide.middle) == "ab...(truncated)...ij"


@pytest.mark.parametrize("turn_by_turn", [False, True], ids=["async", "sync"])
def test_a_slow_tool_holds_back_only_its_own_sample_in_async_mode(
    model_dir: str, tmp_path: Path, turn_by_turn: bool
) -> None:
    examples = [behaving(do) for _ in range(16) for do in ("slow", "echo")]
    _, _, engine, tokenizer = rollout(
        model_dir,
        behaviour_tools(tmp_path),
        examples,
        turn_by_turn=turn_by_turn,
        max_assistant_turns=2,
        tool_num_workers=len(examples),  # every call runs at once: only the loop's order is under test
    )
    fast, slow = (
        tokenizer.encode(f"<tool_response>{t}</tool_response>", add_special_tokens=False) for t in ("42", "99")
    )

    def answered(request: GenerationRequest, answer: list[int]) -> bool:
        """Some sample of this generation call has ``answer`` (a tool's rendered answer) in its context."""
        rows = [ids[m.bool()].tolist() for ids, m in zip(request.input_ids, request.attention_mask, strict=True)]
        return any(row[i : i + len(answer)] == answer for row in rows for i in range(len(row)))

    calls = [(answered(request, fast), answered(request, slow)) for request, _ in engine.calls]
    assert any(s for _, s in calls) and any(f for f, _ in calls), "both tools were called and answered"
    first_fast = next(i for i, (f, _) in enumerate(calls) if f)
    first_slow = next(i for i, (_, s) in enumerate(calls) if s)
    if turn_by_turn:  # every second turn waits for the slow tool
        assert first_fast == first_slow
    else:  # the fast tool's samples went on while the slow tool ran
        assert first_fast < first_slow and not calls[first_fast][1]


def test_a_simulated_user_answers_turns_without_a_tool_call_until_it_ends_the_conversation(
    model_dir: str, tmp_path: Path
) -> None:
    users = tmp_path / "interactions.yaml"
    users.write_text("interaction:\n  - name: patient\n    class_name: tests.generation.agent_tools.PatientUser\n")
    kwargs = {"name": "patient", "reply": "12", "patience": 2}
    examples = [Example("?=", "1", "lookup", {"interaction_kwargs": kwargs}, agent_name="tool_agent")] * 16
    out, stats, _, tokenizer = rollout(
        model_dir, behaviour_tools(tmp_path), examples, interactions=users, response_length=96
    )
    reply = tokenizer.encode("12", add_special_tokens=False)
    context = out["attention_mask"][:, out["prompts"].shape[1] :].bool()
    talked = [r for r in range(len(examples)) if stats.tool_calls[r] == 0 and len(stats.turn_scores[r]) == 2]
    assert talked, stats
    for r in talked:  # the user answered each model turn (scored with the turn's number), then ended it
        assert stats.turn_scores[r] == [1.0, 2.0] and stats.num_turns[r] == 2 + 2 + 1
        assert out["responses"][r][context[r] & ~out["response_mask"][r].bool()].tolist() == reply * 2
