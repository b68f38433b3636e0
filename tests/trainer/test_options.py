"""The entry point's leading options: --config FILE, or Hydra's --config-path/--config-name as verl writes."""

from __future__ import annotations

import pytest

from hybridrl.config.errors import ConfigError
from hybridrl.trainer.main_ppo import split_options


@pytest.mark.parametrize(
    "argv,path,rest",
    [
        (["--config", "a.yaml", "x=1"], "a.yaml", ["x=1"]),
        (["-c", "a.yaml"], "a.yaml", []),
        (["--config=a.yaml", "x=1"], "a.yaml", ["x=1"]),
        (["--config-path", "conf", "--config-name", "ppo", "x=1"], "conf/ppo.yaml", ["x=1"]),
        (["--config-path=conf", "--config-name=ppo.yml"], "conf/ppo.yml", []),
        (["--config-name", "ppo"], "ppo.yaml", []),
        (["x=1", "--config", "a.yaml"], None, ["x=1", "--config", "a.yaml"]),  # the loader refuses the late one
        ([], None, []),
    ],
)
def test_config_file_options(argv, path, rest):
    assert split_options(argv) == (path, rest)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--config"], "--config needs a YAML file path"),
        (["-c", "x=1"], "--config needs a YAML file path"),
        (["--config="], "--config needs a YAML file path"),
        (["--config-path", "conf"], "--config-path needs --config-name NAME"),
        (["--config", "a.yaml", "--config-name", "b"], "not both"),
        (["--cfg", "a.yaml"], "'--cfg' is not an option here"),
    ],
)
def test_bad_options_are_named(argv, message):
    with pytest.raises(ConfigError, match=message):
        split_options(argv)
