import pytest

from hybridrl.checkpoint.manager import CheckpointError, CheckpointManager, resolve_resume


def test_commit_is_atomic_and_latest_survives_a_crash(tmp_path):
    m = CheckpointManager(tmp_path, max_to_keep=2)
    for step in (1, 2, 3):
        tmp = m.begin(step)
        (tmp / "weights").write_text(str(step))
        m.commit(tmp, step, {"sampler": {}})
    assert [p.name for p in m.completed()] == ["global_step_2", "global_step_3"]  # pruned to 2
    crashed = m.begin(4)
    (crashed / "weights").write_text("half")  # a crash here: never committed
    assert m.latest().name == "global_step_3"
    assert resolve_resume("auto", None, m).name == "global_step_3"
    m.remove_stale_temporaries()
    assert not crashed.exists()


def test_resume_modes(tmp_path):
    m = CheckpointManager(tmp_path / "ckpt", max_to_keep=None)
    assert resolve_resume("auto", None, m) is None
    assert resolve_resume("disable", None, m) is None
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        resolve_resume(str(tmp_path / "nowhere"), None, m)
    tmp = m.begin(5)
    final = m.commit(tmp, 5, {})
    assert resolve_resume("resume_path", str(final), m) == final
    assert resolve_resume(str(final), None, m) == final


def test_latest_pointer_to_missing_dir_falls_back(tmp_path):
    m = CheckpointManager(tmp_path, max_to_keep=None)
    m.commit(m.begin(1), 1, {})
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("9")
    assert m.latest().name == "global_step_1"
