"""Every verl example script that runs in hybridrl has a memory plan: the planner reads each layout (FSDP,
Megatron, reward models, LoRA, vLLM) without failing, and every group's peak is positive. A run logs this
plan at its start (``perf/<group>/peak_vs_plan``), so a planner that fails on a config would leave that out."""

from __future__ import annotations

import json

import pytest

from hybridrl.config.loader import load_config
from hybridrl.planning.memory import GB, Device, plan_memory
from hybridrl.planning.shape import read_shape
from hybridrl.trainer.main_ppo import split_options
from tests.verl_corpus.harness import SCRIPTS, load_corpus, load_table, place_verl_files, substitute, verl_argv

RUNS = [entry for entry in load_corpus() if entry["expect"] == "runs"]


@pytest.mark.parametrize("entry", RUNS, ids=[e["script"].removesuffix(".sh") for e in RUNS])
def test_each_corpus_run_has_a_plan(entry, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    shape = dict(model_type="qwen2", vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864)  # fmt: skip
    (model / "config.json").write_text(json.dumps(shape))
    values = {"model": str(model), "reward_model": str(model), "out": str(tmp_path / "run"), "ray_address": "auto"}
    values |= {"train_files": str(tmp_path / "train.parquet"), "val_files": str(tmp_path / "test.parquet")}
    place_verl_files(entry, tmp_path / "home")
    argv = substitute(
        verl_argv(SCRIPTS / entry["script"], tmp_path / "home", env=load_table()["env"]), load_table(), values
    )
    yaml_path, overrides = split_options(argv)  # verl's --config-path/--config-name as the trainer reads them
    cfg = load_config(overrides, yaml_path=yaml_path)
    plan = plan_memory(cfg, read_shape(model), Device("cuda", 80 * GB))
    assert plan.groups and all(group.peak.bytes > 0 for group in plan.groups)
