"""Config files, run directories and cluster addresses that cannot work get one line before anything runs."""

from __future__ import annotations

import logging

import pytest

from hybridrl.cluster.errors import ClusterConnectError
from hybridrl.cluster.ray_cluster import _check_reachable
from hybridrl.config.errors import ConfigError
from hybridrl.config.loader import load_config
from hybridrl.preflight.checks import load_and_check
from hybridrl.trainer.main_ppo import main


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "data:\n  train_batch_size: 4\n  train_batch_size: 8\n",
            r"not valid YAML at line 3, column 3: found duplicate key",
        ),
        ("data: [\n", r"not valid YAML at line 2, column 1: expected the node content"),
        ("- data\n- trainer\n", r"holds a list, not a mapping of sections"),
    ],
)
def test_bad_config_files_get_one_line(tmp_path, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config([], yaml_path=str(path))
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_output_dir_under_a_file_is_refused(tmp_path):
    (tmp_path / "notes").write_text("")
    with pytest.raises(ConfigError, match=r"trainer.output_dir=.*notes/run: .*notes is a file, not a directory"):
        load_and_check([f"trainer.output_dir={tmp_path}/notes/run"])


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_address_where_nothing_listens_fails_at_once(address):
    with pytest.raises(ClusterConnectError, match=rf"Nothing answers at trainer.ray.address={address} .*refused"):
        _check_reachable(address, timeout_s=5)


def test_a_malformed_address_is_named():
    with pytest.raises(ClusterConnectError, match=r"trainer.ray.address=headnode is not host:port"):
        _check_reachable("headnode", timeout_s=5)


def test_main_answers_an_unreachable_cluster_with_one_line(tmp_path, caplog):
    with caplog.at_level(logging.ERROR, logger="hybridrl"):
        code = main(["trainer.ray.address=127.0.0.1:1", f"trainer.output_dir={tmp_path}/run", "trainer.logger=[jsonl]"])
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert code == 1 and len(errors) == 1 and "ClusterConnectError: Nothing answers" in errors[0]
