"""Ulysses sequence parallelism on 4 gloo ranks must compute and train exactly like the same replicas
without it (the parity test of the strategy): log-probs, entropy, values, losses and updated weights, for
sp=2 (2 replicas of 2 ranks, against 2 plain ranks) and sp=4 (one replica of 4, with fewer key/value heads
than ranks, against one process)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from hybridrl.config.loader import load_config
from hybridrl.engine.fsdp.ulysses import UlyssesLayout, slice_packed
from hybridrl.engine.packing import pack_rows
from hybridrl.models.ulysses import SequenceShard, ulysses_fit_errors
from hybridrl.testing.launch import run_ranks
from tests.engine.test_fsdp_parity import _close
from tests.engine.test_megatron_parity import make_batch
from tests.tiny_models import tiny


def overrides(world_size: int, sp: int, extra: tuple[str, ...]) -> list[str]:
    return [
        "data.train_batch_size=8",  # make_batch's 16 rows
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "critic.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "critic.ppo_micro_batch_size_per_gpu=2",
        f"resource_pool.pools.global_pool.GPU={world_size}",
        "actor_rollout_ref.model.use_remove_padding=true",
        "critic.model.use_remove_padding=true",
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}",
        f"critic.ulysses_sequence_parallel_size={sp}",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        # AdamW moves every weight by about lr whatever its gradient, so a gradient near 0 whose last bits
        # differ flips its step: with eps far above the gradients' scale the step is lr x gradient / eps,
        # and equal weights mean equal gradients.
        "actor_rollout_ref.actor.optim.lr=0.1",
        "actor_rollout_ref.actor.optim.eps=1.0",
        "critic.optim.lr=0.1",
        "critic.optim.eps=1.0",
        *extra,
    ]


def run_on_rank(rank: int, world_size: int, model_path: str, sp: int, out_dir: str, extra: tuple[str, ...]) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.actor_rollout import ActorRolloutRole
    from hybridrl.workers.critic import CriticRole

    torch.manual_seed(0)
    cfg = load_config(overrides(world_size, sp, extra))
    mesh = init_device_mesh("cpu", (world_size,))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, model_path, model_path)
    actor, critic = ActorRolloutRole.from_config(cfg, ctx), CriticRole.from_config(cfg, ctx)
    layout = actor.dp_layout("update_actor")
    assert layout == critic.dp_layout("update_critic") == (rank // sp, world_size // sp, rank % sp == 0)
    batch = make_batch(len(actor.tokenizer))
    shard = batch.split(layout.replicas)[layout.replica]
    scored = actor.compute_log_prob(shard)
    values = critic.compute_values(shard)
    assert scored is not None and values is not None
    pg = [actor.update_actor(shard)["actor/pg_loss"] for _ in range(2)]
    vf = [critic.update_critic(shard)["critic/vf_loss"] for _ in range(2)]
    if layout.collects:
        torch.save(
            {
                "log_probs": scored.tensors["old_log_probs"],
                "entropy": scored.tensors["old_entropy"],
                "values": values.tensors["values"],
                "pg": torch.tensor(pg),
                "vf": torch.tensor(vf),
            },
            f"{out_dir}/replica{layout.replica}.pt",
        )
    for role, engine in (("actor", actor.engine), ("critic", critic.engine)):
        state = engine.full_state_dict()
        save_file({k: v.contiguous() for k, v in state.items()}, f"{out_dir}/{role}_rank{rank}.safetensors")


@pytest.mark.parametrize(
    "sp,budget,extra",
    [
        (2, None, ()),
        # every kv head repeated (2 kv heads, 4 ranks); a token budget per rank (x sp); checkpointing
        (4, 8, ("actor_rollout_ref.model.enable_gradient_checkpointing=true",)),
    ],
)
def test_ulysses_matches_single_process(tmp_path, sp, budget, extra):
    model_path = tiny(tmp_path / "m")
    plain, split = tmp_path / "plain", tmp_path / "split"
    plain.mkdir(), split.mkdir()

    # The same replicas without Ulysses: 4 / sp ranks, one per replica, each running whole sequences.
    def tokens(per_rank: int | None) -> tuple[str, ...]:
        keys = ("use_dynamic_bsz=true", f"ppo_max_token_len_per_gpu={per_rank}")
        return () if per_rank is None else tuple(f"actor_rollout_ref.actor.{key}" for key in keys)

    # A budget per rank of a Ulysses group covers sp times the tokens: the same micro-batches.
    run_ranks(run_on_rank, 4 // sp, model_path, 1, str(plain), extra + tokens(budget and budget * sp))
    run_ranks(run_on_rank, 4, model_path, sp, str(split), extra + tokens(budget))
    for replica in range(4 // sp):
        want, got = torch.load(plain / f"replica{replica}.pt"), torch.load(split / f"replica{replica}.pt")
        _close(want, got)
    for role in ("actor", "critic"):
        want = load_file(plain / f"{role}_rank0.safetensors")
        ranks = [load_file(split / f"{role}_rank{r}.safetensors") for r in range(4)]
        for other in ranks[1:]:
            _close(ranks[0], other, rtol=0, atol=0)  # every rank holds the same weights
        _close(want, ranks[0])
        if role == "actor":
            initial = load_file(tmp_path / "m" / "model.safetensors")
            assert any(not torch.equal(initial[k], want[k]) for k in initial), "training changed nothing"


def test_slices_cover_the_packed_sequence_once():
    """Each rank's tokens are a contiguous quarter of the padded sequence, and its response positions are
    exactly those inside it: together, every response position once, in order."""
    batch = make_batch(17)
    t = batch.tensors
    rows = pack_rows(t["input_ids"], t["attention_mask"], t["position_ids"], t["response_mask"])
    parts = [slice_packed(rows, SequenceShard(None, 4, r)) for r in range(4)]
    assert [p.start for p in parts] == [0, *(p.stop for p in parts[:-1])]
    assert parts[-1].stop >= rows.num_tokens > parts[-1].start
    assert torch.equal(torch.cat([p.input_ids for p in parts], 1)[:, : rows.num_tokens], rows.input_ids)
    assert rows.response_index is not None
    kept = torch.cat([p.keep + p.start for p in parts if p.keep is not None])
    assert torch.equal(kept, rows.response_index)
    assert parts[0].counts == [int(p.keep.numel()) for p in parts if p.keep is not None]


def test_layout_and_fit_checks():
    layout = UlyssesLayout(world_size=8, size=4, rank=6)
    assert (layout.dp_rank, layout.dp_size, layout.sp_rank, layout.collects) == (1, 2, 2, False)
    assert ulysses_fit_errors("critic", 2, 4, num_heads=4, num_kv_heads=2) == []
    assert ulysses_fit_errors("critic", 4, 4, num_heads=4, num_kv_heads=2) == []  # kv heads repeated
    errors = " ".join(ulysses_fit_errors("critic", 3, 4, num_heads=4, num_kv_heads=2))
    assert "divide the role's 4 workers" in errors and "4 attention heads" in errors and "key/value" in errors
