"""The Hugging Face export written by every rank (issue #35): files of at most the limit, named and indexed as
``save_pretrained`` names them, equal to the whole model bitwise, and no rank holding more than its share."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM

from hybridrl.checkpoint.hf_files import INDEX_FILE, SINGLE_FILE, ShardedWeightsWriter, read_weights
from hybridrl.models.weights import tied_aliases
from hybridrl.testing.launch import run_ranks
from tests.tiny_models import tiny


def weights(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = {f"layer.{i}.weight": (16 + 8 * (i % 3), 32) for i in range(10)}
    state = {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}
    state["embed.weight"] = torch.randn(64, 32, generator=g).to(torch.bfloat16)  # mixed dtypes, one large
    return state


def test_one_writer_files_of_at_most_the_limit_load_with_transformers(tmp_path):
    config = AutoConfig.from_pretrained(tiny(tmp_path / "tiny"))
    config.tie_word_embeddings = True  # save_pretrained writes the tied weight once: so must the writer
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    path = tmp_path / "reference"
    model.save_pretrained(path)
    state = model.state_dict(keep_vars=True)
    aliases = tied_aliases(state)
    tensors = {name: t.detach() for name, t in state.items() if name not in aliases}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    largest = max(t.numel() * t.element_size() for t in tensors.values())
    out = tmp_path / "out"
    writer = ShardedWeightsWriter(out, 0, 1, max_shard_bytes=max(total // 4, largest))
    for name, tensor in tensors.items():
        writer.add(name, tensor)
    writer.finish()

    index = json.loads((out / INDEX_FILE).read_text())
    files = sorted(out.glob("*.safetensors"))
    assert len(files) >= 4 and sorted(set(index["weight_map"].values())) == [f.name for f in files]
    assert all(f.name == f"model-{i + 1:05d}-of-{len(files):05d}.safetensors" for i, f in enumerate(files))
    assert all(
        sum(t.numel() * t.element_size() for t in load_file(f).values()) <= max(total // 4, largest) for f in files
    )
    assert index["metadata"]["total_size"] == total
    written = read_weights(out)
    reference = load_file(path / SINGLE_FILE)  # save_pretrained's: the tied weight once
    assert written.keys() == reference.keys() and all(torch.equal(written[k], reference[k]) for k in reference)
    model.config.save_pretrained(out)
    ids = torch.tensor([[3, 4, 5, 6]])
    loaded = AutoModelForCausalLM.from_pretrained(out)
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def write_on_rank(rank: int, world_size: int, out: str, max_shard_bytes: int) -> None:
    writer = ShardedWeightsWriter(Path(out), rank, world_size, max_shard_bytes)
    kept = 0
    for name, tensor in weights(seed=0).items():  # every rank sees every tensor, as from a gather
        writer.add(name, tensor)
        kept = max(kept, writer.pending_bytes + sum(nbytes for _, _, nbytes in writer.files))
    writer.finish()
    Path(out, f"kept_{rank}.json").write_text(json.dumps(kept))


def test_ranks_write_their_shares_and_replace_a_stale_export(tmp_path):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "model-00001-of-00009.safetensors").write_bytes(b"stale")  # an earlier export's
    reference = weights(seed=0)
    total = sum(t.numel() * t.element_size() for t in reference.values())
    largest = max(t.numel() * t.element_size() for t in reference.values())
    run_ranks(write_on_rank, 4, str(out), 4096)

    written = read_weights(out)
    assert written.keys() == reference.keys() and all(torch.equal(written[k], reference[k]) for k in reference)
    assert written["embed.weight"].dtype == torch.bfloat16
    files = sorted(out.glob("*.safetensors"))
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(set(index["weight_map"].values())) == [f.name for f in files]  # the stale file is gone
    assert not list(out.glob(".part-*"))
    for rank in range(4):  # each rank kept about its quarter: greedy by bytes, within one tensor
        assert json.loads((out / f"kept_{rank}.json").read_text()) <= total / 4 + largest
