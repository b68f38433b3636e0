"""Multi-turn tool rollouts on the vLLM engine: the agent loop drives vLLM as it drives hf (per-row seeds, a
stop at the tool call's end), the trajectory's tool tokens carry no loss, and vLLM's log-probs of the model's
tokens are the trainer's. Runs where vLLM is installed (``make test`` runs it in .venv-vllm)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hybridrl.config.schema import RolloutConfig
from hybridrl.data.tasks import LookupTask
from hybridrl.models.loader import load_causal_lm, load_tokenizer
from hybridrl.testing.launch import run_ranks
from tests.generation.engines.test_vllm import vllm_engine
from tests.generation.test_agent_loop import RESPONSE, run_agent_loop
from tests.tiny_models import tiny

pytest.importorskip("vllm", reason="vLLM is not installed in this environment: `make test` runs these in .venv-vllm")
pytestmark = pytest.mark.vllm

SIZES = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256)
TOOLS = str(Path(__file__).resolve().parents[3] / "examples" / "tools" / "lookup_tool_config.yaml")


def agent_loop_on_vllm(rank: int, world_size: int, model_path: str) -> None:
    tok = load_tokenizer(model_path)
    model = load_causal_lm(model_path)
    engine = vllm_engine(model_path, tok, RolloutConfig(max_num_seqs=32), max_model_len=8 + RESPONSE)
    engine.load_weights(model.named_parameters())
    examples = LookupTask().examples(32, seed=0)
    out, stats = run_agent_loop(engine, tok, Path(TOOLS), examples, max_assistant_turns=2)
    called = [r for r in range(len(examples)) if stats.num_turns[r] >= 3]
    assert called, "the random model calls the tool sometimes"
    context = out["attention_mask"][:, out["prompts"].shape[1] :].bool()
    trained_on = out["response_mask"].bool()
    for r in called:  # the tool's answer sits in the context, untrained, right after the call
        answer = tok.encode(f"<tool_response>{examples[r].ground_truth}</tool_response>", add_special_tokens=False)
        assert out["responses"][r][context[r] & ~trained_on[r]].tolist()[: len(answer)] == answer
    with torch.no_grad():
        logits = model(
            input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
        ).logits
    width = out["prompts"].shape[1]
    scored = torch.log_softmax(logits[:, width - 1 : -1].float(), -1).gather(-1, out["responses"][..., None])[..., 0]
    torch.testing.assert_close(scored[trained_on], out["rollout_log_probs"][trained_on], atol=1e-4, rtol=0)


def test_agent_loop_on_vllm(tmp_path):
    run_ranks(agent_loop_on_vllm, 1, tiny(tmp_path / "m", **SIZES, extra_tokens=LookupTask.tokens))
