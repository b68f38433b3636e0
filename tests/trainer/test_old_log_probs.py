"""Where the old log-probs come from: the update's own forward, the generation engine, or a separate pass;
and the premise of using the engine's: they equal the separate pass's."""

from __future__ import annotations

import torch

from hybridrl.config.loader import load_config
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from hybridrl.trainer.old_log_probs import OldLogProbs, old_log_prob_source
from tests.tiny_models import tiny

BASE = [
    "actor_rollout_ref.model.path=null",
    "actor_rollout_ref.actor.ppo_mini_batch_size=32",
    "actor_rollout_ref.actor.ppo_epochs=1",
    "algorithm.use_kl_in_reward=false",
]
KL = "algorithm.use_kl_in_reward=true"


def test_the_cheapest_source_that_gives_the_same_numbers_is_chosen():
    def source(*extra, exact=True, overlapped=False):
        return old_log_prob_source(load_config([*BASE, *extra]), exact, overlapped)

    # GRPO-like, exactly on-policy: the update's own forward.
    assert source() == OldLogProbs.UPDATE
    assert source(KL) == OldLogProbs.ROLLOUT  # the KL penalty needs them before the update: the engine's
    assert source("actor_rollout_ref.actor.ppo_epochs=2") == OldLogProbs.ROLLOUT  # the 2nd epoch is off-policy
    assert source(KL, exact=False) == OldLogProbs.PASS  # e.g. vLLM, or bf16: the trainer's own pass
    assert source(KL, "algorithm.rollout_correction.rollout_is=token") == OldLogProbs.PASS  # it compares the two
    assert source(overlapped=True) == OldLogProbs.ROLLOUT  # one step behind: the behaviour policy's


def engine_log_probs_on_rank(rank: int, world_size: int, model_path: str, out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole

    ctx = WorkerContext(rank, world_size, torch.device("cpu"), init_device_mesh("cpu", (1,)), model_path, model_path)
    results = {}
    for precision in ("fp32", "bf16"):
        cfg = load_config(
            [
                "trainer.n_gpus_per_node=1",
                "actor_rollout_ref.rollout.temperature=0.8",
                f"actor_rollout_ref.actor.precision={precision}",
            ]
        )
        actor = ActorRolloutRole.from_config(cfg, ctx)
        results[precision] = actor.rollout_log_probs_exact()
        if precision == "fp32":
            prompts = torch.randint(3, len(actor.tokenizer), (4, 6), generator=torch.Generator().manual_seed(0))
            rollouts = actor.generate(
                Batch.from_dict(
                    tensors={"input_ids": prompts.repeat_interleave(3, 0), "attention_mask": torch.ones(12, 6).long()},
                    meta={"seed": 3},
                )
            )
            passed = actor.compute_log_prob(rollouts)
            mask = rollouts.tensors["response_mask"]
            results["gap"] = float(
                ((rollouts.tensors["rollout_log_probs"] - passed.tensors["old_log_probs"]) * mask).abs().max()
            )
            results["tokens"] = int(mask.sum())
    torch.save(results, out)


def test_the_hf_engines_fp32_log_probs_are_the_separate_passs(tmp_path):
    run_ranks(engine_log_probs_on_rank, 1, tiny(tmp_path / "m"), str(tmp_path / "out.pt"))
    results = torch.load(tmp_path / "out.pt")
    assert results["fp32"] is True and results["bf16"] is False
    assert results["tokens"] > 12
    assert results["gap"] < 1e-5
