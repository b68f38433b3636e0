"""verl's own example scripts (tests/verl_corpus/scripts, byte for byte from verl) run through hybridrl's
command line for one step on a tiny model: bash expands each script as a verl user's shell would, and one
substitution table (tests/verl_corpus/substitutions.yaml) swaps paths and sizes only; corpus.yaml says how
each ends. Each script runs once as written, except:

- vLLM lines run with actor_rollout_ref.rollout.name=hf where vLLM is not installed (the main suite), and as
  written in .venv-vllm only where corpus.yaml marks them ``vllm_ci`` (a 1-step vLLM run costs 12-20 s on
  2 CPU cores: two representative lines, PPO with a critic and dynamic batch sizes, and DAPO, keep the
  suite within its time; PPO with a critic on vLLM also runs as verl's quickstart types it,
  tests/trainer/test_verl_quickstart.py, and GRPO with vLLM, a KL loss included, is
  tests/trainer/test_vllm_e2e.py's);
- SGLang and TensorRT-LLM lines (``also_hf``) must end in their one line as written, and run with hf too;
- a script whose hf run the table makes another script's (``same_run_as``: their sizes and paths were all that
  differed) has its checked config compared with that one's instead of running it again."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from pathlib import Path
from typing import Any

import pytest

from hybridrl.preflight.checks import load_and_check
from hybridrl.trainer.main_ppo import main, split_options
from tests.ray_clusters import head_node_args
from tests.verl_corpus.harness import (
    SCRIPTS,
    load_corpus,
    load_table,
    place_verl_files,
    split_override,
    substitute,
    verl_argv,
)

CORPUS = load_corpus()
TABLE = load_table()
HAS_VLLM = importlib.util.find_spec("vllm") is not None
ROLLOUT_NAME = "actor_rollout_ref.rollout.name"
SLOW = [pytest.mark.ray, pytest.mark.slow]


def _hf_table() -> dict[str, Any]:
    return {**TABLE, "replace": {**TABLE["replace"], ROLLOUT_NAME: "hf"}}


def _cases() -> list[Any]:
    cases = []
    for entry in CORPUS:
        stem = entry["script"].removesuffix(".sh")
        if entry.get("engine") == "vllm":
            if entry.get("vllm_ci"):
                vllm = [*SLOW, pytest.mark.vllm, pytest.mark.skipif(not HAS_VLLM, reason="needs vLLM (.venv-vllm)")]
                cases.append(pytest.param(entry, False, id=stem, marks=vllm))
            cases.append(
                pytest.param(entry, True, id=f"{stem}.hf", marks=[*SLOW, pytest.mark.skipif(HAS_VLLM, reason="hf")])
            )
            continue
        cases.append(pytest.param(entry, False, id=stem, marks=SLOW))
        if entry.get("also_hf"):
            cases.append(pytest.param(entry, True, id=f"{stem}.hf", marks=SLOW))
    return cases


def _values(home: Path, out: Path, assets: dict[str, Path] | None = None, ray_address: str = "auto") -> dict[str, str]:
    assets = assets or {}
    return {
        "model": str(assets.get("model", home / "model")),
        "reward_model": str(assets.get("reward_model", home / "reward_model")),
        "train_files": str(assets.get("train_files", home / "train.parquet")),
        "val_files": str(assets.get("val_files", home / "test.parquet")),
        "out": str(out),
        "ray_address": ray_address,
    }


# -- fast: the harness and the table, no Ray ---------------------------------------------------------------


def test_corpus_lists_every_stored_script_once():
    listed = [entry["script"] for entry in CORPUS]
    assert sorted(listed) == sorted(p.name for p in SCRIPTS.glob("*.sh"))
    assert len(set(listed)) == len(listed) >= 26
    for entry in CORPUS:
        assert entry["script"] == entry["verl_file"].removeprefix("examples/").replace("/", "__")
        expect = entry["expect"]
        assert expect == "runs" or (set(expect) == {"refused", "why"}), entry["script"]


@pytest.mark.parametrize("entry", CORPUS, ids=[e["script"].removesuffix(".sh") for e in CORPUS])
def test_script_yields_a_verl_command_line(entry, tmp_path):
    home = tmp_path / "home"
    checkout = place_verl_files(entry, home)
    argv = verl_argv(SCRIPTS / entry["script"], home, env=TABLE["env"])
    assert argv and all(split_override(a) or a.startswith("--config") for a in argv)
    argv = substitute(argv, TABLE, _values(Path("/assets"), tmp_path / "run"))
    # every path the script made from $HOME is one the table replaced, or verl's own file it reads
    in_checkout = {str(p) for p in checkout} | {str(p.parent) for p in checkout}
    assert not [a for a in argv if str(home) in a and a.split("=", 1)[-1].strip("'\"") not in in_checkout]


def test_substitution_table_has_no_dead_rows(tmp_path):
    keys: set[str] = set()
    for entry in CORPUS:
        argv = verl_argv(SCRIPTS / entry["script"], tmp_path / "home", env=TABLE["env"])
        keys |= {parsed[1] for parsed in map(split_override, argv) if parsed}
    assert sorted(set(TABLE["replace"]) - keys) == []


# -- slow: each script's one-step run on one shared Ray cluster ---------------------------------------------


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    from hybridrl.models.reward_model import build_tiny_reward_model
    from tests.examples.gsm8k_fixture import fixture_parquet, tiny_llama

    root = tmp_path_factory.mktemp("verl_corpus_assets")
    # vLLM's CPU attention takes heads of 32 dimensions and up: one model for every engine
    model = tiny_llama(root / "llama", hidden_size=64, num_attention_heads=2)
    train, test = fixture_parquet(root)  # 8 training prompts, 4 test prompts in verl's gsm8k format
    tool_train, tool_test = fixture_parquet(root, "gsm8k_tool_agent")  # the same, as verl's tool datasets
    reward_model = Path(build_tiny_reward_model(root / "reward_model"))
    return {
        "model": model,
        "reward_model": reward_model,
        "train_files": train,
        "val_files": test,
        "gsm8k_tool_agent": (tool_train, tool_test),
    }


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args=head_node_args(4),
    )
    yield c
    c.shutdown()


def _argv(entry: dict[str, Any], hf: bool, home: Path, values: dict[str, str]) -> list[str]:
    """The script's command line as the run gets it: expanded by bash, then the table applied."""
    place_verl_files(entry, home)
    raw = verl_argv(SCRIPTS / entry["script"], home, env=TABLE["env"])
    argv = substitute(raw, _hf_table() if hf else TABLE, values)
    if hf and not any((split_override(a) or ("", "", ""))[1] == ROLLOUT_NAME for a in argv):
        argv.append(f"{ROLLOUT_NAME}=hf")
    return argv


def _hf_run_config(argv: list[str]) -> dict[str, Any]:
    """What an hf run on CPU does with ``argv``: its checked config, less the names it files its outputs under
    and the engine memory share only vLLM and SGLang read."""
    yaml_path, overrides = split_options(argv)
    config = dataclasses.asdict(load_and_check(overrides, yaml_path=yaml_path))
    for name in ("project_name", "experiment_name"):
        config["trainer"].pop(name)
    config["actor_rollout_ref"]["rollout"].pop("gpu_memory_utilization")
    return config


@pytest.mark.parametrize(("entry", "hf"), _cases())
def test_verl_script_runs_one_step(entry, hf, assets, cluster, tmp_path, caplog, monkeypatch):
    out = tmp_path / "run"
    if "data" in entry:
        train, test = assets[entry["data"]]
        assets = {**assets, "train_files": train, "val_files": test}
    values = _values(tmp_path, out, assets, cluster.address)
    argv = _argv(entry, hf, tmp_path / "home", values)
    expect = entry.get("hf_expect", entry["expect"]) if hf else entry["expect"]
    if hf and "same_run_as" in entry:
        # The table leaves this script the same run as another's (its sizes and paths were all that differed):
        # that script's case runs it; a translation that tells them apart fails here.
        twin = next(e for e in CORPUS if e["script"] == entry["same_run_as"])
        assert expect == "runs" == twin.get("hf_expect", twin["expect"])
        assert _hf_run_config(argv) == _hf_run_config(_argv(twin, hf, tmp_path / "twin_home", values))
        return

    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="hybridrl"):
        code = main(argv)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("hybridrl")]

    if expect == "runs":
        assert code == 0, errors
        step = out / "checkpoints" / "global_step_1"  # trainer.default_local_dir, in verl's layout
        assert (step / "actor").is_dir() and (step.parent / "latest_checkpointed_iteration.txt").read_text() == "1"
        assert (step / "critic").is_dir() == any(a.endswith("adv_estimator=gae") for a in argv)
        assert (out / "metrics.jsonl").is_file()  # whatever trainer.logger says (most name wandb, not installed)
    else:
        assert code == 2, errors
        assert len(errors) == 1, errors
        assert expect["refused"] in errors[0], errors
