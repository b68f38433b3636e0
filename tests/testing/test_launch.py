"""run_ranks: every rank's results arrive, and one rank's failure fails the launch with its traceback."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist
from torch.multiprocessing import ProcessRaisedException

from hybridrl.testing.launch import run_ranks


def sum_ranks(rank: int, world_size: int, out: str) -> None:
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    torch.save(t, f"{out}/rank{rank}.pt")


def fail_on_last(rank: int, world_size: int) -> None:
    if rank == world_size - 1:
        raise ValueError(f"rank {rank} got bad input")


def test_every_rank_writes_its_result(tmp_path):
    run_ranks(sum_ranks, 2, str(tmp_path))
    assert [float(torch.load(tmp_path / f"rank{r}.pt")) for r in range(2)] == [3.0, 3.0]


def test_a_failing_rank_fails_the_launch_with_its_error():
    # Rank 0 finishes and waits at the closing barrier; the launcher must end it, not hang.
    with pytest.raises(ProcessRaisedException, match="rank 1 got bad input"):
        run_ranks(fail_on_last, 2)


def hang_on_rank_0(rank: int, world_size: int) -> None:
    if rank == 0:
        threading.Event().wait()


def test_ranks_past_the_deadline_are_ended_with_their_stacks():
    # Rank 0 hangs, rank 1 waits for it at the closing barrier: run_ranks must end both itself and say
    # where each one waits (pytest-timeout would show only the launcher's stack).
    with pytest.raises(TimeoutError) as failure:
        run_ranks(hang_on_rank_0, 2, timeout_s=3.0)
    message = str(failure.value)
    assert "ranks [0, 1] of 2 still running after 3 s" in message
    rank0, rank1 = message.split("--- rank 0 ---")[1].split("--- rank 1 ---")
    assert "in hang_on_rank_0" in rank0
    assert "in _entry" in rank1 and "in hang_on_rank_0" not in rank1
