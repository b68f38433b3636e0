"""One live run per output directory; a lock left by a dead run is taken over."""

from __future__ import annotations

import os

import pytest

from hybridrl.trainer.run_lock import LOCK_NAME, RunLockError, hold_run_lock


def test_a_second_run_on_the_same_directory_is_refused(tmp_path):
    with hold_run_lock(tmp_path):
        assert f"pid {os.getpid()}" in (tmp_path / LOCK_NAME).read_text()
        expected = rf"Another hybridrl run \(pid {os.getpid()} on .*\) is using"
        with pytest.raises(RunLockError, match=expected), hold_run_lock(tmp_path):
            pass
    with hold_run_lock(tmp_path):  # released at the end of the first run
        pass


def test_a_stale_lock_file_is_taken_over(tmp_path):
    (tmp_path / LOCK_NAME).write_text("pid 999999999 on a machine long gone")  # no process holds it
    with hold_run_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().startswith(f"pid {os.getpid()} ")
