"""Rows that share a prompt run it once (``use_prefix_grouper``): the same outputs and gradients as every
row running its own prompt, for the policy, the critic and fused scoring, on one process and on two FSDP
ranks; and the cases that cannot share fall back to the plain forward."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.algorithms.token_logprobs import TokenScores, TokenScoring
from hybridrl.config.loader import load_config
from hybridrl.config.schema import OptimConfig
from hybridrl.engine import prompt_sharing
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.prompt_sharing import prompt_groups
from hybridrl.models.loader import enable_activation_checkpointing, load_causal_lm, load_value_model
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from hybridrl.workers.forward import response_values
from tests.engine.test_fsdp_parity import overrides
from tests.tiny_models import tiny

P, R = 5, 4  # prompt and response columns


def grouped_batch(vocab: int, prompts: int = 4, n: int = 3, seed: int = 0) -> Batch:
    """``prompts`` left-padded prompts of different lengths, each sampled ``n`` times (rows of one prompt
    apart from each other, as after a shuffle), with right-padded responses."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.randint(3, vocab, (prompts, P), generator=g)
    prompt_mask = torch.ones(prompts, P, dtype=torch.long)
    for i in range(prompts):
        prompt_mask[i, : i % 3] = 0  # 0, 1 or 2 left-padding columns
    order = torch.arange(prompts * n) % prompts  # prompt 0, 1, ..., then 0, 1, ... again
    rows = len(order)
    responses = torch.randint(3, vocab, (rows, R), generator=g)
    response_mask = torch.ones(rows, R, dtype=torch.long)
    response_mask[::2, R - 1 :] = 0  # every other response ends a token early
    attention_mask = torch.cat([prompt_mask[order], response_mask], 1)
    input_ids = torch.cat([prompt_ids[order] * prompt_mask[order], responses * response_mask], 1)
    return Batch.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0),
            "responses": responses * response_mask,
            "response_mask": response_mask,
            "advantages": torch.randn(rows, R, generator=g),
        },
        meta={"seed": 1},
    )


def test_rows_with_the_same_prompt_are_found_wherever_they_sit():
    ids = torch.tensor([[0, 5, 6], [7, 8, 9], [0, 5, 6], [5, 6, 1], [7, 8, 9]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1], [1, 1, 1]])
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    groups = prompt_groups(ids, mask, pos, prompt_len=3, min_saved_tokens=0)
    assert groups is not None
    assert groups.inverse[0] == groups.inverse[2] and groups.inverse[1] == groups.inverse[4]
    assert len(set(groups.inverse.tolist())) == 3
    assert torch.equal(ids[groups.first][groups.inverse], ids)  # each row's group holds its own prompt
    # Padding's token ids do not tell prompts apart; where the padding sits does.
    padded = torch.tensor([[4, 5, 6], [9, 5, 6], [5, 6, 0]])
    padded_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 0]])
    found = prompt_groups(
        padded, padded_mask, (padded_mask.cumsum(1) - 1).clamp(min=0), prompt_len=3, min_saved_tokens=0
    )
    assert found is not None and found.inverse.tolist()[0] == found.inverse.tolist()[1] != found.inverse[2]
    assert prompt_groups(ids[:2], mask[:2], pos[:2], prompt_len=3, min_saved_tokens=0) is None  # nothing to share
    # Sharing that saves fewer prompt tokens than the second model call costs is not done.
    assert prompt_groups(ids, mask, pos, prompt_len=3, min_saved_tokens=7) is None
    assert prompt_groups(ids, mask, pos, prompt_len=3, min_saved_tokens=6) is not None  # 2 rows x 3 tokens


def _outputs_and_grads(engine: TrainEngine, batch: Batch, scoring: TokenScoring | None, read) -> tuple:
    engine.model.zero_grad()
    out = read(engine.model_output(batch, scoring), batch)
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in engine.model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def _logits(output, batch):
    return output[:, -R - 1 : -1] if output.shape[1] != R else output


def _values(output, batch):
    return response_values(output, batch) * batch.tensors["response_mask"]


def _scores(output, batch):
    assert isinstance(output, TokenScores) and output.entropy is not None
    return torch.stack([output.log_probs, output.entropy], -1) * batch.tensors["response_mask"].unsqueeze(-1)


@pytest.mark.parametrize("head", ["logits", "values", "fused_scores"])
def test_sharing_gives_the_plain_forwards_outputs_and_gradients(tmp_path, head, monkeypatch):
    monkeypatch.setattr(prompt_sharing, "MIN_SAVED_TOKENS", 0)  # the tiny batch saves only 40 prompt tokens
    path = tiny(tmp_path / "m")
    fused = head == "fused_scores"
    results = []
    for share in (False, True):
        torch.manual_seed(0)
        model = load_value_model(path, init_std=0.02) if head == "values" else load_causal_lm(path)
        engine = TrainEngine(
            model, torch.device("cpu"), optim_cfg=OptimConfig(), fused_kernels=fused, share_prompts=share
        )
        assert engine.share_prompts is share
        batch = grouped_batch(model.backbone.config.vocab_size if head == "values" else model.config.vocab_size)
        scoring = TokenScoring(0.7, with_entropy=True, entropy_grad=True) if fused else None
        read = {"logits": _logits, "values": _values, "fused_scores": _scores}[head]
        calls: list[int] = []
        model.register_forward_pre_hook(lambda module, args, calls=calls: calls.append(1))
        results.append(_outputs_and_grads(engine, batch, scoring, read))
        assert len(calls) == (2 if share else 1)  # the distinct prompts, then the responses on their cache
    (plain, plain_grads), (shared, shared_grads) = results
    torch.testing.assert_close(shared, plain, rtol=0, atol=1e-5)
    assert plain_grads.keys() == shared_grads.keys() and plain_grads
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


def test_cases_that_cannot_share_run_every_prompt(tmp_path, caplog):
    path = tiny(tmp_path / "m")
    checkpointed = load_causal_lm(path)
    enable_activation_checkpointing(checkpointed)
    with caplog.at_level("INFO"):
        assert not TrainEngine(checkpointed, torch.device("cpu"), share_prompts=True).share_prompts
        assert not TrainEngine(
            load_causal_lm(path), torch.device("cpu"), remove_padding=True, share_prompts=True
        ).share_prompts
    assert "activation checkpointing" in caplog.text and "use_remove_padding" in caplog.text


def update_on_rank(rank: int, world_size: int, model_path: str, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole

    prompt_sharing.MIN_SAVED_TOKENS = 0  # this rank's process: the tiny batch saves only 14 prompt tokens
    ctx = WorkerContext(
        rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (world_size,)), model_path, model_path
    )
    for share in ("false", "true"):
        cfg = load_config(
            overrides(
                world_size,
                "FULL_SHARD",
                (
                    f"actor_rollout_ref.actor.use_prefix_grouper={share}",
                    f"critic.use_prefix_grouper={share}",
                    "actor_rollout_ref.rollout.n=3",
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=6",
                    "critic.ppo_micro_batch_size_per_gpu=6",
                ),
            )
        )
        torch.manual_seed(0)
        actor, critic = ActorRolloutRole.from_config(cfg, ctx), CriticRole.from_config(cfg, ctx)
        assert actor.engine.share_prompts is critic.engine.share_prompts is (share == "true")
        batch = grouped_batch(len(actor.tokenizer))
        # Each rank's 6 rows: two prompts, 3 samples each (the driver keeps a prompt's samples together).
        batch = batch[torch.argsort(torch.arange(len(batch)) % 4, stable=True).numpy()]
        shard = batch.split(world_size)[rank]
        with_values = shard
        with_values.union(critic.compute_values(shard))
        with_values.tensors["returns"] = with_values.tensors["advantages"] + with_values.tensors["values"]
        with_values.union(actor.compute_log_prob(shard))
        actor.update_actor(with_values)
        critic.update_critic(with_values)
        for what, state in (("actor", actor.engine.full_state_dict()), ("critic", critic.engine.full_state_dict())):
            if rank == 0:
                save_file({k: v.contiguous() for k, v in state.items()}, f"{out_dir}/{what}_{share}.safetensors")


def test_sharing_trains_like_the_plain_forward_on_two_fsdp_ranks(tmp_path):
    path = tiny(tmp_path / "m")
    run_ranks(update_on_rank, 2, path, str(tmp_path))
    for what in ("actor", "critic"):
        plain, shared = (
            load_file(tmp_path / f"{what}_false.safetensors"),
            load_file(tmp_path / f"{what}_true.safetensors"),
        )
        assert plain.keys() == shared.keys()
        if what == "actor":
            initial = load_file(tmp_path / "m" / "model.safetensors")
            assert any(not torch.equal(plain[k], initial[k]) for k in initial)  # the update moved the weights
        for k in plain:
            torch.testing.assert_close(
                shared[k], plain[k], rtol=0, atol=1e-6, msg=lambda m, k=k, w=what: f"{w} {k}: {m}"
            )
