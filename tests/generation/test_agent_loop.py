"""The tool agent loop on the tiny model and the hf engine: the trainer gets exactly the tokens generated,
tools' tokens stay in the context without loss, samples do not depend on their neighbours, and a tool that
fails in any way is an error message in the conversation, never a failed rollout."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hybridrl.algorithms.losses import compute_kl_loss, compute_policy_loss
from hybridrl.config.choices import TruncateSide
from hybridrl.config.schema import MultiTurnConfig, SamplingConfig
from hybridrl.data.dataset import PromptDataset
from hybridrl.data.tasks import Example, LookupTask
from hybridrl.generation.agent_loop import AgentLoop, truncate_tool_text
from hybridrl.generation.engines.base import GenerationRequest
from hybridrl.generation.engines.hf import HFRolloutEngine
from hybridrl.tools.config import load_tool_config
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


def rollout(model_dir: str, tools: Path, examples: list[Example], **multi_turn):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    engine = RecordingEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine.calls = []
    batch = PromptDataset(examples, tokenizer, 8).collate(list(range(len(examples))))
    cfg = MultiTurnConfig(enable=True, tool_config_path=str(tools), stop_after_tool_call=True, **multi_turn)
    loop = AgentLoop(cfg, load_tool_config(str(tools)), engine, tokenizer, max_response_length=RESPONSE, pad_token_id=0)
    try:
        out, stats = loop.run(
            batch.tensors["input_ids"],
            batch.tensors["attention_mask"],
            list(batch.non_tensors["agent_name"]),
            list(batch.non_tensors["tools_kwargs"]),
            SAMPLING,
            seed=5,
        )
    finally:
        loop.close()
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


def test_a_failing_tool_is_an_error_message_and_the_rollout_goes_on(
    model_dir: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
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
    examples = [
        Example(
            "?=", "1", "lookup", {"tools_kwargs": {"lookup": {"create_kwargs": {"do": do}}}}, agent_name="tool_agent"
        )
        for _ in range(8)
        for do in BEHAVIOURS
    ]
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
