"""Format-2 checkpoints (torch.distributed.checkpoint): one writer per shard, and a resume onto another
number of workers or another layout that continues training as the same-layout resume does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch.distributed.device_mesh import init_device_mesh
from torch.nn import functional as F

from hybridrl.checkpoint.dcp_io import (
    INDEX,
    checkpoint_format,
    load_engine,
    read_full,
    save_engine,
)
from hybridrl.checkpoint.export import export_actor
from hybridrl.checkpoint.hf_files import INDEX_FILE, read_weights
from hybridrl.checkpoint.manager import STATE
from hybridrl.checkpoint.shards import save_engine_shard
from hybridrl.config.loader import load_config
from hybridrl.engine.base import TrainEngine
from hybridrl.engine.factory import make_engine
from hybridrl.models.loader import load_causal_lm
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks
from tests.tiny_models import tiny as tiny_model

B, T, STEPS = 8, 6, 2  # sequences, tokens, optimizer steps before and after the checkpoint
SAVED_LR = 1e-3
FSDP = "actor_rollout_ref.actor.fsdp"
MEGATRON = ("actor_rollout_ref.actor.strategy=megatron",)
LAYOUTS = {
    "fsdp4": (4, (f"{FSDP}.sharding_strategy=FULL_SHARD",)),
    "hsdp2x2": (4, (f"{FSDP}.sharding_strategy=HYBRID_SHARD", f"{FSDP}.shard_group_size=2")),
    "noshard2": (2, (f"{FSDP}.sharding_strategy=NO_SHARD",)),
    "tp2": (2, (*MEGATRON, "actor_rollout_ref.actor.parallel_config.megatron.tp_size=2")),
    "pp2": (2, (*MEGATRON, "actor_rollout_ref.actor.parallel_config.megatron.pp_size=2")),
}


def build(world_size: int, model_path: str, layout: tuple[str, ...], lr: float) -> TrainEngine:
    """The actor's training engine in ``layout``, AdamW with a non-zero weight decay (a param group value)."""
    cfg = load_config(
        [
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "critic.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "critic.ppo_micro_batch_size_per_gpu=1",
            f"resource_pool.pools.global_pool.GPU={world_size}",
            f"actor_rollout_ref.actor.optim.lr={lr}",
            "actor_rollout_ref.actor.optim.weight_decay=0.01",
            # A larger eps keeps Adam from amplifying float noise in ~0 gradients (see test_megatron_parity).
            "actor_rollout_ref.actor.optim.eps=1e-4",
            *layout,
        ]
    )
    mesh = init_device_mesh("cpu", (world_size,))
    section = cfg.actor_rollout_ref.actor
    return make_engine(load_causal_lm(model_path), section, mesh=mesh, device=torch.device("cpu"), train=True)


def lm_loss(logits: torch.Tensor, mb: Batch) -> tuple[torch.Tensor, dict[str, float]]:
    ids = mb.tensors["input_ids"]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
    return loss, {}


def train(engine: TrainEngine, vocab: int, steps: int) -> None:
    """``steps`` optimizer steps on a fixed batch; each data-parallel rank takes its rows, in 2 micro-batches."""
    ids = torch.randint(3, vocab, (B, T), generator=torch.Generator().manual_seed(0))
    batch = Batch.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": torch.ones(B, T, dtype=torch.long),
            "position_ids": torch.arange(T).expand(B, -1).clone(),
        }
    )
    mine = batch.split(engine.dp_size)[engine.dp_rank]
    for _ in range(steps):
        engine.forward_backward(mine.split(2), lm_loss)
        engine.step(grad_clip=1.0)


def write_full(engine: TrainEngine, rank: int, path: Path) -> None:
    state = engine.full_state_dict()  # a collective: every rank calls it
    if rank == 0:
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))


def train_save_resume(rank: int, world_size: int, model_path: str, out: str, fmt: int) -> None:
    """Train, save (format ``fmt``), train on (the uninterrupted run); a fresh engine in the same layout
    loads the checkpoint and trains on too (the same-layout resume)."""
    out_dir, layout = Path(out), LAYOUTS["fsdp4"][1]
    engine = build(world_size, model_path, layout, SAVED_LR)
    vocab = engine.full_state_dict()["lm_head.weight"].shape[0]
    train(engine, vocab, STEPS)
    assert engine.optimizer is not None
    if fmt == 2:
        save_engine(engine.model, engine.optimizer, out_dir / "ckpt")
    else:
        save_engine_shard(engine.model, engine.optimizer, out_dir / "ckpt", rank, world_size)
    write_full(engine, rank, out_dir / "saved.safetensors")
    train(engine, vocab, STEPS)
    write_full(engine, rank, out_dir / "uninterrupted.safetensors")
    resumed = build(world_size, model_path, layout, lr=7e-4)
    assert resumed.optimizer is not None
    load_engine(resumed.model, resumed.optimizer, out_dir / "ckpt", rank, world_size)
    write_full(resumed, rank, out_dir / "loaded.safetensors")
    train(resumed, vocab, STEPS)
    write_full(resumed, rank, out_dir / "trained.safetensors")


def resume_in(rank: int, world_size: int, model_path: str, ckpt: str, out: str, layout_name: str) -> None:
    """Load ``ckpt`` into ``layout_name``, save it again from there, and train on."""
    out_dir = Path(out)
    engine = build(world_size, model_path, LAYOUTS[layout_name][1], lr=7e-4)  # the checkpoint's lr wins
    assert engine.optimizer is not None
    load_engine(engine.model, engine.optimizer, Path(ckpt), rank, world_size)
    assert engine.optimizer.param_groups[0]["lr"] == SAVED_LR
    write_full(engine, rank, out_dir / "loaded.safetensors")
    save_engine(engine.model, engine.optimizer, out_dir / "resaved")
    vocab = engine.full_state_dict()["lm_head.weight"].shape[0]
    train(engine, vocab, STEPS)
    write_full(engine, rank, out_dir / "trained.safetensors")


def bytes_on_disk(path: Path) -> int:
    """Bytes of tensor data in every safetensors file of ``path`` (headers aside)."""
    files = [load_file(file) for file in path.glob("*.safetensors")]
    return sum(t.numel() * t.element_size() for tensors in files for t in tensors.values())


def assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def as_checkpoint(root: Path, engine_dir: Path, model_path: str) -> Path:
    """A complete global_step directory around an actor engine folder, as the trainer writes it."""
    step = root / "global_step_2"
    shutil.copytree(engine_dir, step / "actor_rollout")
    hf = step / "actor_rollout" / "hf"
    hf.mkdir()
    for file in Path(model_path).iterdir():
        if file.suffix != ".safetensors":
            shutil.copy(file, hf / file.name)
    (step / STATE).write_text(json.dumps({"step": 2}))
    return step


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return tiny_model(tmp_path_factory.mktemp("reshard") / "m")


@pytest.fixture(scope="module")
def source(tiny, tmp_path_factory) -> Path:
    """2 ranks, FULL_SHARD: trained, saved in format 2, resumed in the same layout."""
    out = tmp_path_factory.mktemp("source")
    run_ranks(train_save_resume, 2, tiny, str(out), 2)
    return out


def test_same_layout_resume_is_exact(source):
    saved = load_file(source / "saved.safetensors")
    assert_equal(load_file(source / "loaded.safetensors"), saved)
    assert_equal(load_file(source / "trained.safetensors"), load_file(source / "uninterrupted.safetensors"))
    ckpt = source / "ckpt"
    assert checkpoint_format(ckpt) == 2
    assert json.loads((ckpt / INDEX).read_text())["param_groups"][0]["lr"] == SAVED_LR
    assert not list(ckpt.glob("*.metadata")) and not list(ckpt.glob("*.pt")), "no pickle on disk"
    assert_equal(read_full(ckpt, prefix="model."), saved)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_resume_onto_another_layout(tiny, source, tmp_path, layout):
    world = LAYOUTS[layout][0]
    run_ranks(resume_in, world, tiny, str(source / "ckpt"), str(tmp_path), layout)
    # The loaded full state is the saved one, bitwise: the model, and (saved again from this layout) the
    # optimizer state too.
    assert_equal(load_file(tmp_path / "loaded.safetensors"), load_file(source / "saved.safetensors"))
    assert_equal(read_full(tmp_path / "resaved"), read_full(source / "ckpt"))
    # Training on matches the same-layout resume up to float noise (another reduction order).
    expected, got = load_file(source / "trained.safetensors"), load_file(tmp_path / "trained.safetensors")
    assert expected.keys() == got.keys()
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-5, msg=lambda m, k=key: f"{k}: {m}")
    # One copy on disk whatever the replication (DCP spreads the replicated chunks over the replicas).
    resaved = tmp_path / "resaved"
    assert bytes_on_disk(resaved) == bytes_on_disk(source / "ckpt")
    assert len(list(resaved.glob("*.safetensors"))) <= world


def test_one_copy_on_disk(source):
    """The source checkpoint (and so every resaved one, above) is one copy of model + AdamW (exp_avg,
    exp_avg_sq, a 0-d step per parameter) in fp32."""
    model = load_file(source / "saved.safetensors")
    params = sum(t.numel() for t in model.values())
    assert bytes_on_disk(source / "ckpt") == 4 * (3 * params + len(model))


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_one_process_loads_and_another_model_is_refused(tiny, source, tmp_path):
    """Without a process group the checkpoint loads into a plain model; another model's shapes are named."""
    model = load_causal_lm(tiny)
    load_engine(model, torch.optim.AdamW(model.parameters()), source / "ckpt", 0, 1)
    assert_equal({k: v.contiguous() for k, v in model.state_dict().items()}, load_file(source / "saved.safetensors"))
    other = tiny_model(tmp_path / "wide", hidden_size=48)
    model = load_causal_lm(other)
    with pytest.raises(ValueError, match=r"has shape \(17, 32\), this model's \(17, 48\)"):
        load_engine(model, torch.optim.AdamW(model.parameters()), source / "ckpt", 0, 1)


def test_format1_loads_in_its_layout_and_exports(tiny, tmp_path):
    run_ranks(train_save_resume, 2, tiny, str(tmp_path), 1)
    ckpt = tmp_path / "ckpt"
    assert checkpoint_format(ckpt) == 1 and (ckpt / "rank_1.json").exists()
    saved = load_file(tmp_path / "saved.safetensors")
    assert_equal(load_file(tmp_path / "loaded.safetensors"), saved)
    assert_equal(load_file(tmp_path / "trained.safetensors"), load_file(tmp_path / "uninterrupted.safetensors"))
    # Another worker count is refused with the format-1 message, before any collective.
    model = load_causal_lm(tiny)
    optimizer = torch.optim.AdamW(model.parameters())
    with pytest.raises(ValueError, match="written by 2 workers; this run has 4"):
        load_engine(model, optimizer, ckpt, 0, 4)
    exported = export_actor(as_checkpoint(tmp_path / "run", ckpt, tiny), tmp_path / "hf")
    assert_equal(load_file(exported / "model.safetensors"), saved)


def test_format2_exports(tiny, source, tmp_path):
    exported = export_actor(as_checkpoint(tmp_path / "run", source / "ckpt", tiny), tmp_path / "hf")
    assert_equal(load_file(exported / "model.safetensors"), load_file(source / "saved.safetensors"))


def test_format2_exports_streamed_in_files_of_the_limit(tiny, source, tmp_path):
    """The checkpoint is read a file's worth at a time into files of at most the limit (#35): the same
    weights, bitwise, as the whole-model export above."""
    saved = load_file(source / "saved.safetensors")
    limit = max(t.numel() * t.element_size() for t in saved.values())  # one tensor a file, at the largest
    exported = export_actor(
        as_checkpoint(tmp_path / "run", source / "ckpt", tiny), tmp_path / "hf", max_shard_bytes=limit
    )
    files = list(exported.glob("model-*-of-*.safetensors"))
    assert len(files) > 2 and (exported / INDEX_FILE).is_file() and not (exported / "model.safetensors").exists()
    assert_equal(read_weights(exported), saved)


def test_unrecognised_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path} holds no engine checkpoint"):
        checkpoint_format(tmp_path)
    (tmp_path / INDEX).write_text(json.dumps({"format": 9}))
    with pytest.raises(ValueError, match="says format 9"):
        checkpoint_format(tmp_path)
