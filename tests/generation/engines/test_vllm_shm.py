"""A killed vLLM CPU engine leaves its tensor-parallel shared memory behind under a name without a run id;
the next engine on the same ranks removes only its own rank's stale segment (no vLLM needed)."""

from hybridrl.generation.engines.vllm import unlink_stale_cpu_shm


def test_each_rank_removes_only_its_own_stale_segment(tmp_path):
    names = ["-tp:0-[0-1]-cpushm_0", "-tp:0-[0-1]-cpushm_1", "-tp:0-[2-3]-cpushm_0", "other-run-file"]
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    assert unlink_stale_cpu_shm(rank=1, tp=2, shm_dir=str(tmp_path)) == ["-tp:0-[0-1]-cpushm_1"]
    assert unlink_stale_cpu_shm(rank=2, tp=2, shm_dir=str(tmp_path)) == ["-tp:0-[2-3]-cpushm_0"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["-tp:0-[0-1]-cpushm_0", "other-run-file"]
