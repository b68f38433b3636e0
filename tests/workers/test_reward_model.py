"""The reward-model role: FSDP scores match a plain HF forward, padding- and rank-layout-invariant."""

from __future__ import annotations

import pytest
import torch

from hybridrl.config.schema import RewardModelConfig, RewardModelModelConfig
from hybridrl.models.reward_model import build_tiny_reward_model, load_reward_model
from hybridrl.protocol import Batch
from hybridrl.testing.launch import run_ranks

# Different lengths (in characters = tokens of the tiny tokenizer), so micro-batches get padded.
PROMPTS = ["12+34=", "7-3=", "100+200=", "5=", "9+9=", "31-4=", "2+2=", "123456+654321="]
RESPONSES = ["46", "4", "300", "5", " 18", "27", "5", "777777"]
MICRO = 3
TRUNC = 5


def make_cfg(
    path: str | None,
    max_length: int = 64,
    micro: int = MICRO,
    tokenizer_path: str | None = None,
    packed: bool = False,
):
    return RewardModelConfig(
        enable=True,
        model=RewardModelModelConfig(path=path, tokenizer_path=tokenizer_path, use_remove_padding=packed),
        max_length=max_length,
        micro_batch_size_per_gpu=micro,
    )


def make_batch(lo: int = 0, hi: int = len(PROMPTS)) -> Batch:
    return Batch.from_dict(non_tensors={"prompt_text": PROMPTS[lo:hi], "response_text": RESPONSES[lo:hi]})


def plain_score(model, tokenizer, text: str | None = None, ids: list[int] | None = None) -> float:
    if ids is None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, 0])


def score_on_rank(rank: int, world_size: int, path: str, out: str, packed: bool = False) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.reward_model import RewardModelRole

    mesh = init_device_mesh("cpu", (world_size,))
    ctx = WorkerContext(rank, world_size, torch.device("cpu"), mesh, path, path)
    role = RewardModelRole(make_cfg(path, packed=packed), ctx, seed=0)
    n = len(PROMPTS)
    res = {}
    # Each rank scores its half (equal shards) ...
    lo, hi = rank * n // world_size, (rank + 1) * n // world_size
    res["half"] = role.compute_rm_score(make_batch(lo, hi)).tensors["rm_scores"]
    # ... and an uneven split (rank 0 takes all but one row): unequal micro-batch counts must not hang.
    cut = n - 1 if world_size > 1 else n
    lo, hi = (0, cut) if rank == 0 else (cut, n)
    res["uneven"] = role.compute_rm_score(make_batch(lo, hi)).tensors["rm_scores"]
    # An empty shard on the last rank.
    lo, hi = (0, n) if rank == 0 else (n, n)
    res["empty_last"] = role.compute_rm_score(make_batch(lo, hi)).tensors["rm_scores"]
    if world_size > 1:  # bad input on one rank: every rank raises (none is left waiting)
        bad = (
            make_batch(0, 2) if rank == 0 else Batch.from_dict(non_tensors={"prompt_text": [""], "response_text": [""]})
        )
        try:
            role.compute_rm_score(bad)
            res["bad"] = "no error"
        except (ValueError, RuntimeError) as exc:
            res["bad"] = type(exc).__name__
    if world_size == 1:
        res["alone"] = torch.cat([role.compute_rm_score(make_batch(i, i + 1)).tensors["rm_scores"] for i in range(n)])
        short = RewardModelRole(make_cfg(path, max_length=TRUNC), ctx, seed=0)
        res["trunc"] = short.compute_rm_score(make_batch()).tensors["rm_scores"]
        res["trunc_ids"] = short.tokenize(PROMPTS, RESPONSES)
    torch.save(res, f"{out}/rank{rank}.pt")


@pytest.fixture(scope="module")
def rm_path(tmp_path_factory) -> str:
    return build_tiny_reward_model(tmp_path_factory.mktemp("rm"), seed=0)


def _run(tmp_path_factory, path: str, world_size: int, packed: bool = False) -> list[dict]:
    out = tmp_path_factory.mktemp(f"w{world_size}")
    run_ranks(score_on_rank, world_size, path, str(out), packed)
    return [torch.load(out / f"rank{r}.pt") for r in range(world_size)]


@pytest.fixture(scope="module")
def single(tmp_path_factory, rm_path) -> dict:
    return _run(tmp_path_factory, rm_path, 1)[0]


@pytest.fixture(scope="module")
def plain(rm_path):
    model, tokenizer = load_reward_model(rm_path)
    assert model.config.pad_token_id == tokenizer.pad_token_id and tokenizer.padding_side == "right"
    return model, tokenizer


def test_scores_match_plain_forward_and_ignore_padding(single, plain):
    model, tokenizer = plain
    expected = torch.tensor([plain_score(model, tokenizer, p + r) for p, r in zip(PROMPTS, RESPONSES)])
    scores = single["half"]
    assert scores.dtype == torch.float32 and scores.shape == (len(PROMPTS),)
    assert expected.std() > 1e-3  # the scores differ from text to text: the comparison means something
    torch.testing.assert_close(scores, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(single["alone"], expected, rtol=0, atol=1e-5)  # unpadded, one at a time
    torch.testing.assert_close(single["uneven"], expected, rtol=0, atol=1e-5)


def test_two_ranks_match_single_process(tmp_path_factory, rm_path, single):
    ranks = _run(tmp_path_factory, rm_path, 2)
    torch.testing.assert_close(torch.cat([r["half"] for r in ranks]), single["half"], rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.cat([r["uneven"] for r in ranks]), single["half"], rtol=0, atol=1e-5)
    assert ranks[1]["empty_last"].shape == (0,)
    torch.testing.assert_close(ranks[0]["empty_last"], single["half"], rtol=0, atol=1e-5)
    assert [r["bad"] for r in ranks] == ["RuntimeError", "ValueError"]


def test_packed_rows_score_as_padded_ones(tmp_path_factory, rm_path, single):
    """use_remove_padding: each micro-batch's texts packed into one sequence score as padded rows do, on
    two ranks with uneven and empty shards too."""
    ranks = _run(tmp_path_factory, rm_path, 2, packed=True)
    torch.testing.assert_close(torch.cat([r["half"] for r in ranks]), single["half"], rtol=0, atol=1e-5)
    torch.testing.assert_close(torch.cat([r["uneven"] for r in ranks]), single["half"], rtol=0, atol=1e-5)
    torch.testing.assert_close(ranks[0]["empty_last"], single["half"], rtol=0, atol=1e-5)


def test_left_truncation_keeps_the_end(single, plain):
    model, tokenizer = plain
    enc = single["trunc_ids"]
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
        full = tokenizer(p + r, add_special_tokens=False)["input_ids"]
        kept = enc["input_ids"][i][enc["attention_mask"][i].bool()].tolist()
        assert kept == full[-TRUNC:]
        assert enc["attention_mask"][i, : len(kept)].all()  # right padding: real tokens first
    tails = [tokenizer(p + r, add_special_tokens=False)["input_ids"][-TRUNC:] for p, r in zip(PROMPTS, RESPONSES)]
    expected = torch.tensor([plain_score(model, tokenizer, ids=ids) for ids in tails])
    torch.testing.assert_close(single["trunc"], expected, rtol=0, atol=1e-5)
    # Rows longer than the limit lose their start, so their scores change.
    assert not torch.allclose(single["trunc"][0], single["half"][0])


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "no_such_rm"
    with pytest.raises(FileNotFoundError, match="no_such_rm"):
        load_reward_model(str(missing))

    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.reward_model import RewardModelRole

    ctx = WorkerContext(0, 1, torch.device("cpu"), None, "", "")
    with pytest.raises(FileNotFoundError, match="no_such_rm"):
        RewardModelRole(make_cfg(str(missing)), ctx, seed=0)
    with pytest.raises(FileNotFoundError, match="None"):
        RewardModelRole(make_cfg(None), ctx, seed=0)


def test_tokenizer_path_override_is_checked(rm_path, tmp_path):
    from hybridrl.engine.context import WorkerContext
    from hybridrl.workers.reward_model import RewardModelRole

    ctx = WorkerContext(0, 1, torch.device("cpu"), None, "", "")
    with pytest.raises(FileNotFoundError, match="no_such_tok"):
        RewardModelRole(make_cfg(rm_path, tokenizer_path=str(tmp_path / "no_such_tok")), ctx, seed=0)
