"""Files and directories a run needs, checked before anything starts: data, the run directory, model and
tokenizer directories, the reward file (parsed, never run)."""

from __future__ import annotations

import os
from pathlib import Path

from hybridrl.config.choices import RewardManager
from hybridrl.config.errors import fail as _fail
from hybridrl.config.schema import Config
from hybridrl.rewards.custom import CustomRewardError, check_reward_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_paths(cfg: Config) -> None:
    _check_output_dir(cfg.trainer.output_dir)
    _check_data_and_rewards(cfg)
    _check_model_dirs(cfg)


def _model_dir_problem(directory: Path, weights: bool = True) -> str | None:
    """What a local Hugging Face model directory lacks (the workers would fail later, less clearly)."""
    if not (directory / "config.json").is_file():
        return f"{directory} has no config.json; give a Hugging Face model directory (save_pretrained's output)"
    if weights and not any(directory.glob("*.safetensors")):
        return (
            f"{directory} has no *.safetensors weights; save the model with save_pretrained(..., "
            f"safe_serialization=True)"
        )
    return None


def _check_model_dirs(cfg: Config) -> None:
    model = cfg.actor_rollout_ref.model
    if model.path is not None:
        problem = _model_dir_problem(Path(model.path).expanduser())
        if problem:
            _fail(f"actor_rollout_ref.model.path: {problem}.")
    if model.tokenizer_path is not None or model.path is not None:
        tokenizer = Path(model.tokenizer_path or model.path or "").expanduser()
        if not any((tokenizer / name).is_file() for name in TOKENIZER_FILES):
            key = "tokenizer_path" if model.tokenizer_path else "path"
            _fail(
                f"actor_rollout_ref.model.{key}: {tokenizer} has no tokenizer files ({', '.join(TOKENIZER_FILES)}); "
                f"save the tokenizer there, or set actor_rollout_ref.model.tokenizer_path."
            )
    if cfg.critic.model.path is not None:
        problem = _model_dir_problem(Path(cfg.critic.model.path).expanduser())
        if problem:
            _fail(f"critic.model.path: {problem}.")
    if cfg.reward_model.enable and cfg.reward_model.model.path is not None:
        problem = _model_dir_problem(Path(cfg.reward_model.model.path).expanduser())
        if problem:
            _fail(f"reward_model.model.path: {problem}.")


def _check_data_and_rewards(cfg: Config) -> None:
    for key, paths in (("train_files", cfg.data.train_file_list()), ("val_files", cfg.data.val_file_list())):
        for path in paths:
            if Path(path).is_dir():
                _fail(f"data.{key}: {path} is a directory; give the parquet files in it (a list is fine).")
            if not Path(path).is_file():
                _fail(f"data.{key}: {path} does not exist (a verl-format parquet file is expected).")
    if cfg.data.train_files is not None and not cfg.data.train_file_list():
        _fail("data.train_files is empty; give one or more parquet files, or null for the built-in task.")
    if cfg.trainer.ray.working_dir is not None and not Path(cfg.trainer.ray.working_dir).expanduser().is_dir():
        _fail(f"trainer.ray.working_dir={cfg.trainer.ray.working_dir} is not a directory.")
    if cfg.data.val_files is not None and cfg.data.train_files is None:
        _fail("data.val_files is set but data.train_files is not; give both (or neither, for the built-in task).")
    model = cfg.actor_rollout_ref.model
    for key, directory in (("model.path", model.path), ("model.tokenizer_path", model.tokenizer_path)):
        if directory is not None and not Path(directory).expanduser().is_dir():
            _fail(
                f"actor_rollout_ref.{key}: {directory} is not a directory; give a local Hugging Face model directory."
            )
    if cfg.critic.model.path is not None and not Path(cfg.critic.model.path).expanduser().is_dir():
        _fail(f"critic.model.path: {cfg.critic.model.path} is not a directory.")
    rm = cfg.reward_model
    if rm.enable:
        if rm.model.path is None or not Path(rm.model.path).expanduser().is_dir():
            _fail(
                f"reward_model.enable=true needs reward_model.model.path=<local sequence-classification model "
                f"directory>; got {rm.model.path!r}."
            )
        if rm.max_length < 2 or rm.micro_batch_size_per_gpu < 1:
            _fail(
                f"reward_model.max_length ({rm.max_length}) must be >= 2 and "
                f"reward_model.micro_batch_size_per_gpu ({rm.micro_batch_size_per_gpu}) >= 1."
            )
    batch = cfg.reward_model.reward_manager == RewardManager.batch
    if batch and not cfg.custom_reward_function.path:
        _fail(
            "reward_model.reward_manager=batch calls a custom reward function once per batch: set "
            "custom_reward_function.path to a file defining compute_score(data_sources, solution_strs, "
            "ground_truths, extra_infos), or use reward_manager=naive."
        )
    if cfg.custom_reward_function.path:
        try:
            check_reward_file(cfg.custom_reward_function.path, cfg.custom_reward_function.name, batch)
        except CustomRewardError as exc:
            _fail(f"custom_reward_function: {exc}")


def _check_output_dir(output_dir: str) -> None:
    """The run directory can be made and written: its nearest existing ancestor is a writable directory."""
    path = Path(output_dir)
    for existing in (path, *path.parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            _fail(f"trainer.output_dir={output_dir}: {existing} is a file, not a directory; choose another path.")
        if not os.access(existing, os.W_OK | os.X_OK):
            _fail(f"trainer.output_dir={output_dir}: {existing} is not writable; choose another path.")
        return
