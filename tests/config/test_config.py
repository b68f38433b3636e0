import dataclasses
import subprocess
import sys

import pytest

from hybridrl.cli import main as cli_main
from hybridrl.config.loader import ConfigError, load_config
from hybridrl.config.schema import Config
from hybridrl.preflight.checks import load_and_check
from tests.config.test_schema import leaf_keys


def test_defaults_load_and_are_readonly():
    cfg = load_config()
    assert cfg.trainer.total_steps > 0
    assert cfg.trainer.output_dir == "outputs/hybridrl/default"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.trainer.total_steps = 3  # type: ignore[misc]


def test_dotted_override_and_interpolation():
    cfg = load_config(
        ["trainer.total_steps=7", "trainer.experiment_name=x", "actor_rollout_ref.actor.optim.betas=[0.8,0.9]"]
    )
    assert cfg.trainer.total_steps == 7
    assert cfg.trainer.output_dir == "outputs/hybridrl/x"
    assert list(cfg.actor_rollout_ref.actor.optim.betas) == [0.8, 0.9]


def test_unknown_key_names_closest_valid_key():
    with pytest.raises(ConfigError, match=r"Unknown config key 'trainer.total_stepz'.*'trainer.total_steps'"):
        load_config(["trainer.total_stepz=3"])
    with pytest.raises(ConfigError, match=r"actor_rollout_ref.actor.optim"):
        load_config(["actor_rollout_ref.actor.optm.lr=1"])


def test_bad_type_names_the_key():
    with pytest.raises(ConfigError, match=r"trainer.total_steps.*'abc'"):
        load_config(["trainer.total_steps=abc"])


def test_bad_enum_lists_valid_values():
    with pytest.raises(ConfigError, match=r"sharding_strategy='FULL'.*FULL_SHARD, SHARD_GRAD_OP"):
        load_config(["actor_rollout_ref.actor.fsdp.sharding_strategy=FULL"])
    with pytest.raises(ConfigError, match=r"algorithm.adv_estimator='ppo'.*gae"):
        load_and_check(["algorithm.adv_estimator=ppo"])
    with pytest.raises(ConfigError, match=r"data.task='nope'.*copy"):
        load_and_check(["data.task=nope"])


def test_micro_batch_that_does_not_divide_shows_numbers():
    # default: 16 prompts x 4 samples / 2 workers = 32 sequences per worker per mini-batch
    with pytest.raises(ConfigError, match=r"ppo_micro_batch_size_per_gpu \(5\).*= 32 sequences"):
        load_and_check(["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=5"])


def test_mini_batch_must_divide_train_batch():
    with pytest.raises(ConfigError, match=r"critic.ppo_mini_batch_size \(6\) must divide data.train_batch_size \(16\)"):
        load_and_check(["algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=6"])


def test_sequences_must_split_over_workers():
    with pytest.raises(ConfigError, match=r"= 15 sequences cannot be split evenly over the 2 workers"):
        load_and_check(
            [
                "data.train_batch_size=15",
                "actor_rollout_ref.rollout.n=1",
                "actor_rollout_ref.actor.ppo_mini_batch_size=15",
                "critic.ppo_mini_batch_size=15",
            ]
        )


def test_pool_mapping_errors():
    with pytest.raises(ConfigError, match=r"pool 'nowhere', which is not defined"):
        load_and_check(["algorithm.adv_estimator=gae", "resource_pool.mapping.critic=nowhere"])
    with pytest.raises(ConfigError, match=r"unknown role 'rewardz'"):
        load_and_check(["resource_pool.mapping.rewardz=global_pool"])


def test_override_without_equals():
    with pytest.raises(ConfigError, match=r"key=value"):
        load_config(["trainer.total_steps"])


def test_config_show_prints_resolved_yaml(capsys):
    assert cli_main(["config", "show", "trainer.total_steps=11"]) == 0
    out = capsys.readouterr().out
    assert "total_steps: 11" in out and "output_dir: outputs/hybridrl/default" in out


def test_config_show_error_exit_code(capsys):
    assert cli_main(["config", "show", "trainer.total_stepz=3"]) == 2
    assert "trainer.total_steps" in capsys.readouterr().err


def test_main_rejects_bad_config_before_ray(tmp_path):
    """A config mistake exits non-zero with one clear message and starts no Ray actor (or cluster)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hybridrl.trainer.main_ppo import main; code = main(sys.argv[1:]);"
            "print('RAY_LOADED', 'ray' in sys.modules); sys.exit(code)",
            "trainer.total_stepz=3",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "Did you mean 'trainer.total_steps'" in errors[0]
    assert "RAY_LOADED False" in proc.stdout
    assert not (tmp_path / "outputs").exists()


def test_every_key_is_documented():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md").read_text()
    missing = [k for k in leaf_keys(Config) if f"`{k}`" not in doc]
    assert not missing, f"keys missing from docs/CONFIG.md: {missing}"


def test_uninstalled_tracker_is_one_warning_and_metrics_jsonl_is_always_written(tmp_path, caplog):
    import importlib.util

    from hybridrl.observability.tracking.tracker import Tracker

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    cfg = load_and_check(["trainer.logger=[console,wandb]"])  # verl's scripts name wandb: the run goes on
    with caplog.at_level("WARNING", logger="hybridrl"):
        tracker = Tracker(list(cfg.trainer.logger), tmp_path, cfg)
    tracker.log({"critic/score/mean": 0.5, "timing_s/step": 1.0}, step=1)
    tracker.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "pip install 'hybridrl[wandb]'" in warnings[0], warnings
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1  # console only, and still the record
    with pytest.raises(ConfigError, match=r"choose one of: console, jsonl, tensorboard, wandb, mlflow"):
        load_config(["trainer.logger=[nope]"])


def test_seed_strategy_form_is_normalised(tmp_path):
    seed = tmp_path / "fsdp_default.yaml"
    seed.write_text(
        "critic:\n  strategy:\n    name: fsdp\n    params: {mixed_precision: true, sharding_strategy: "
        "HYBRID_SHARD, cpu_offload: false, limit_all_gathers: true}\n"
    )
    cfg = load_config([], yaml_path=str(seed))
    assert cfg.critic.strategy == "fsdp"
    assert cfg.critic.fsdp.sharding_strategy == "HYBRID_SHARD" and cfg.critic.fsdp.mixed_precision is True
    cfg = load_config(
        [
            "actor_rollout_ref.actor.strategy.name=fsdp",
            "actor_rollout_ref.actor.strategy.params.sharding_strategy=NO_SHARD",
        ]
    )
    assert cfg.actor_rollout_ref.actor.fsdp.sharding_strategy == "NO_SHARD"
    with pytest.raises(ConfigError, match=r"takes 'name' and 'params'; got \['paramz'\]"):
        load_config(["critic.strategy.paramz.x=1"])


def test_shard_group_must_divide_the_workers():
    with pytest.raises(
        ConfigError, match=r"actor_rollout_ref.actor.fsdp.shard_group_size \(3\) must divide the 2 workers"
    ):
        load_and_check(
            [
                "actor_rollout_ref.actor.fsdp.sharding_strategy=HYBRID_SHARD",
                "actor_rollout_ref.actor.fsdp.shard_group_size=3",
            ]
        )
