"""Every bad input gets one line (issue #18): a table of inputs the training entry point must refuse.

Each row runs ``main_ppo.main`` in-process and checks the exit code (2 for a config error, 1 for a known
run failure), that exactly one ERROR record was logged, on one line, naming the key or path at fault,
and that no traceback reached stdout, stderr or the log. Almost every row fails before Ray starts; the
few that need the worker groups are marked ``ray``.

In a row, ``{f}`` is the directory of bad files the ``bad_files`` fixture writes, and ``{ray}`` the address of
the session's shared Ray cluster (``shared_ray``), started only for the rows that name it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.models.tiny import build_tokenizer
from hybridrl.trainer.main_ppo import main
from tests.tiny_models import tiny

# Root reads and writes through file permissions: the permission rows need another user.
as_root = pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
ray_run = [pytest.mark.ray, pytest.mark.slow]

GOOD_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
TEXT_FILES = {
    # YAML config files
    "dup.yaml": "data:\n  train_batch_size: 4\n  train_batch_size: 8\n",
    "syntax.yaml": "data: [\n",
    "list.yaml": "- data\n- trainer\n",
    "tab.yaml": "data:\n\ttrain_batch_size: 4\n",
    "indent.yaml": "data:\n  train_batch_size: 4\n trainer: 1\n",
    "unclosed.yaml": "data: {train_batch_size: 4\n",
    "alias.yaml": "data:\n  train_batch_size: &a 4\n  shuffle: *b\n",
    "badtype.yaml": "data:\n  train_batch_size: abc\n",
    "unknown.yaml": "dtaa:\n  train_batch_size: 4\n",
    "enum.yaml": "actor_rollout_ref:\n  actor:\n    strategy: deepspeed\n",
    "address.yaml": "trainer:\n  ray:\n    address: headnode\n",
    "locked.yaml": "data: {}\n",
    # tool configs (multi-turn rollouts)
    "tools_mcp.yaml": "tools:\n  - class_name: x.Y\n    config: {type: mcp}\n    tool_schema: {type: function, function: {name: t}}\n",
    "tools_missing_class.yaml": "tools:\n  - class_name: hybridrl_no_such.Tool\n    config: {}\n    tool_schema: {type: function, function: {name: t}}\n",
    # custom reward files
    "syntax.py": "def compute_score(:\n",
    "signature.py": "def compute_score(solution):\n    return 1.0\n",
    "other_name.py": "def other(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n",
    "not_callable.py": "compute_score = 3\n",
    "import_error.py": "import hybridrl_no_such_module\n\n" + GOOD_REWARD,
    "raises.py": "raise RuntimeError('boom at import')\n\n" + GOOD_REWARD,
    "exits.py": "import sys\n\nsys.exit(3)\n\n" + GOOD_REWARD,
    "locked.py": GOOD_REWARD,
    # neither
    "notes": "a file where a directory is expected\n",
    "not.parquet": "not parquet",
    "zero.parquet": "",
}
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}"


def _parquet(path: Path, rows: int = 40, **columns: list) -> None:
    """A verl-format file of ``rows`` copies of one good row; ``columns`` replace (or, as None, drop) columns."""
    row = {
        "data_source": "copy",
        "prompt": [{"role": "user", "content": "123"}],
        "reward_model": {"ground_truth": "123"},
    }
    for key, value in columns.items():
        if value is None:
            del row[key]
        else:
            row[key] = value
    pq.write_table(pa.Table.from_pylist([row] * rows), path)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("bad_inputs")
    for name, text in TEXT_FILES.items():
        (f / name).write_text(text)
    for name in ("locked.yaml", "locked.py"):
        (f / name).chmod(0)
    (f / "a_dir").mkdir()
    (f / "read_only").mkdir(mode=0o555)

    _parquet(f / "good.parquet")
    _parquet(f / "unknown_source.parquet", data_source="my/dataset")
    _parquet(f / "locked.parquet")
    (f / "locked.parquet").chmod(0)
    _parquet(f / "no_prompt.parquet", prompt=None, question=[{"role": "user", "content": "123"}])
    _parquet(f / "no_reward_model.parquet", reward_model=None)
    _parquet(f / "string_prompt.parquet", prompt="123")
    _parquet(f / "no_ground_truth.parquet", reward_model={"style": "rule"})
    _parquet(f / "empty_source.parquet", data_source="")
    _parquet(f / "long_prompts.parquet", prompt=[{"role": "user", "content": "1234" * 20}])

    tokenizer = build_tokenizer()  # the tiny model's, with the chat template parquet prompts need
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(f / "chat_tokenizer")
    model = Path(tiny(f / "model"))
    shutil.copytree(model, f / "no_template")  # the tiny model's tokenizer without its chat template
    (f / "no_template" / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((f / "no_template" / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (f / "no_template" / "tokenizer_config.json").write_text(json.dumps(config))
    shutil.copytree(model, f / "no_weights")
    for weights in (f / "no_weights").glob("*.safetensors"):
        weights.unlink()
    shutil.copytree(model, f / "no_config")
    (f / "no_config" / "config.json").unlink()
    (f / "model_no_tokenizer").mkdir()
    for path in model.iterdir():
        if "token" not in path.name and path.name not in ("vocab.json", "merges.txt", "special_tokens_map.json"):
            shutil.copy(path, f / "model_no_tokenizer" / path.name)
    pq.write_table(pq.read_table(f / "good.parquet").slice(0, 0), f / "empty.parquet")  # every column, no row
    (f / "binary.yaml").write_bytes(b"\xff\xfe\x00data")
    (f / "scalar.yaml").write_text("42\n")
    (f / "words.yaml").write_text("not a config\n")
    (f / "run_time").mkdir()
    for name, text in MISBEHAVING_REWARD.items():
        (f / "run_time" / name).write_text(text)
    return f


TOK = "actor_rollout_ref.model.tokenizer_path={f}/chat_tokenizer"
MEGATRON = "actor_rollout_ref.actor.strategy=megatron"
MICRO_4 = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"  # divides the n=1 per-worker mini-batch (8 / 2)
GAE = "algorithm.adv_estimator=gae"  # a critic: the default run (GRPO) has none
LAYOUT = "actor_rollout_ref.actor.parallel_config.megatron"
CPU_POOL = "resource_pool.mapping={actor_rollout: p, critic: p, ref: p}"

CONFIG_VALUES = [
    # wrong type
    pytest.param(["data.train_batch_size=abc"], 2, r"'data\.train_batch_size': Value 'abc'.*Integer", id="int-str"),
    pytest.param(["data.train_batch_size=1.5"], 2, r"'data\.train_batch_size': Value '1\.5'", id="int-float"),
    pytest.param(["data.train_batch_size=[1,2]"], 2, r"'data\.train_batch_size': Value '\[1, 2\]'", id="int-list"),
    pytest.param(
        ["data.train_batch_size=null"], 2, r"'data\.train_batch_size': Incompatible value 'None'", id="int-null"
    ),
    pytest.param(["trainer.total_steps=many"], 2, r"'trainer\.total_steps': Value 'many'", id="steps-str"),
    pytest.param(["trainer.save_freq=abc"], 2, r"'trainer\.save_freq': Value 'abc'", id="save-freq-str"),
    pytest.param(["data.shuffle=maybe"], 2, r"'data\.shuffle': Value 'maybe' is not a valid bool", id="bool-str"),
    pytest.param(["actor_rollout_ref.actor.optim.lr=fast"], 2, r"'actor_rollout_ref\.actor\.optim\.lr'", id="lr-str"),
    pytest.param(["reward.failure_score=abc"], 2, r"'reward\.failure_score': Value 'abc'", id="float-str"),
    pytest.param(
        ["actor_rollout_ref.actor.optim.betas=0.9"],
        2,
        r"actor_rollout_ref\.actor\.optim\.betas=\[0\.9\] must be two numbers",
        id="betas-scalar",
    ),
    pytest.param(["trainer.logger=jsonll"], 2, r"trainer\.logger\[0\]='jsonll' is not valid", id="logger-scalar"),
    pytest.param(["data.task_kwargs=3"], 2, r"'data\.task_kwargs': Cannot assign int", id="dict-int"),
    pytest.param(["resource_pool.pools=3"], 2, r"'resource_pool\.pools': Cannot assign int", id="pools-int"),
    pytest.param(["resource_pool.pools.global_pool=3"], 2, r"'resource_pool\.pools\.global_pool'", id="pool-int"),
    # out of range
    pytest.param(["data.train_batch_size=0"], 2, r"data\.train_batch_size=0 must be positive", id="batch-zero"),
    pytest.param(["data.train_batch_size=-4"], 2, r"data\.train_batch_size=-4 must be positive", id="batch-negative"),
    pytest.param(["data.train_size=0"], 2, r"data\.train_size=0 must be positive", id="train-size-zero"),
    pytest.param(["data.max_prompt_length=0"], 2, r"data\.max_prompt_length=0 must be positive", id="prompt-len-zero"),
    pytest.param(["data.max_response_length=0"], 2, r"data\.max_response_length=0 must be", id="response-len-zero"),
    pytest.param(["trainer.total_steps=0"], 2, r"trainer\.total_steps=0 must be positive", id="steps-zero"),
    pytest.param(
        ["actor_rollout_ref.rollout.n=0"], 2, r"actor_rollout_ref\.rollout\.n=0 must be positive", id="n-zero"
    ),
    pytest.param(
        ["actor_rollout_ref.actor.optim.lr=-1"], 2, r"actor_rollout_ref\.actor\.optim\.lr=-1\.0 must", id="lr-neg"
    ),
    pytest.param(["critic.optim.lr=0"], 2, r"critic\.optim\.lr=0\.0 must be positive", id="critic-lr-zero"),
    pytest.param(
        ["actor_rollout_ref.actor.ppo_epochs=0"], 2, r"actor\.ppo_epochs=0 must be positive", id="epochs-zero"
    ),
    pytest.param(["critic.ppo_epochs=0"], 2, r"critic\.ppo_epochs=0 must be positive", id="critic-epochs-zero"),
    pytest.param(
        ["critic.forward_micro_batch_size_per_gpu=0"],
        2,
        r"critic\.forward_micro_batch_size_per_gpu=0 must be positive",
        id="critic-forward-micro-zero",
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=0"],
        2,
        r"rollout\.log_prob_micro_batch_size_per_gpu=0 must be positive",
        id="rollout-micro-zero",
    ),
    pytest.param(
        ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=-1"],
        2,
        r"ref\.log_prob_micro_batch_size_per_gpu=-1 must be positive",
        id="ref-micro-negative",
    ),
    pytest.param(["trainer.learning_check_window=0"], 2, r"trainer\.learning_check_window=0 must", id="window-zero"),
    pytest.param(
        ["actor_rollout_ref.actor.clip_ratio=0"], 2, r"actor\.clip_ratio=0\.0 must be positive", id="clip-zero"
    ),
    pytest.param(
        ["actor_rollout_ref.actor.clip_ratio_low=-0.1"], 2, r"actor\.clip_ratio_low=-0\.1 must", id="clip-low"
    ),
    pytest.param(["actor_rollout_ref.actor.clip_ratio_high=0"], 2, r"actor\.clip_ratio_high=0\.0 must", id="clip-high"),
    pytest.param(["actor_rollout_ref.actor.clip_ratio_c=0.5"], 2, r"actor\.clip_ratio_c=0\.5 must be > 1", id="clip-c"),
    pytest.param(["algorithm.gamma=1.5"], 2, r"algorithm\.gamma=1\.5 .*must lie in \[0, 1\]", id="gamma"),
    pytest.param(["algorithm.lam=-0.1"], 2, r"algorithm\.lam=-0\.1 must lie in \[0, 1\]", id="lam"),
    pytest.param(["actor_rollout_ref.rollout.temperature=0"], 2, r"rollout\.temperature must be > 0", id="temperature"),
    pytest.param(["trainer.save_freq=0"], 2, r"trainer\.save_freq=0: use a positive number", id="save-freq-zero"),
    pytest.param(["trainer.save_freq=-5"], 2, r"trainer\.save_freq=-5: use a positive number", id="save-freq-neg"),
    pytest.param(["trainer.test_freq=0"], 2, r"trainer\.test_freq=0: use a positive number", id="test-freq-zero"),
    pytest.param(["trainer.straggler_factor=1"], 2, r"trainer\.straggler_factor=1\.0 must be > 1", id="straggler"),
    pytest.param(["trainer.breakdown_interval=-1"], 2, r"trainer\.breakdown_interval=-1 must be >= 0", id="breakdown"),
    pytest.param(["trainer.cluster_stats_interval=-2"], 2, r"trainer\.cluster_stats_interval=-2 must", id="stats"),
    pytest.param(
        ["trainer.val_generations_to_log=-1"], 2, r"trainer\.val_generations_to_log must be >= 0", id="val-log"
    ),
    pytest.param(["trainer.max_restarts=-1"], 2, r"trainer\.max_restarts=-1 must be >= 0", id="max-restarts"),
    pytest.param(["actor_rollout_ref.rollout.val_kwargs.n=0"], 2, r"val_kwargs\.n=0 must be >= 1", id="val-n"),
    pytest.param(
        ["actor_rollout_ref.actor.gradient_scale=0"], 2, r"actor\.gradient_scale must be positive", id="scale"
    ),
    pytest.param(
        ["algorithm.filter_groups.max_num_gen_batches=0"],
        2,
        r"algorithm\.filter_groups\.max_num_gen_batches \(0\) must be >= 1",
        id="gen-batches",
    ),
    pytest.param(["reward.num_workers=-1"], 2, r"reward\.num_workers=-1 must be >= 0", id="reward-workers"),
    pytest.param(["reward.timeout_s=0"], 2, r"reward\.timeout_s=0\.0 > 0", id="reward-timeout"),
    # unknown keys
    pytest.param(
        ["data.trian_batch_size=4"],
        2,
        r"Unknown config key 'data\.trian_batch_size'\. Did you mean 'data\.train_batch_size'\?",
        id="unknown-typo",
    ),
    pytest.param(
        ["trainer.totl_steps=4"], 2, r"'trainer\.totl_steps'\. Did you mean 'trainer\.total_steps'", id="typo2"
    ),
    pytest.param(["foo.bar=1"], 2, r"Unknown config key 'foo'\.", id="unknown-section"),
    pytest.param(["+data.new_key=1"], 2, r"Unknown config key 'data\.new_key'", id="hydra-append"),
    pytest.param(["~data.nope"], 2, r"Unknown config key 'data\.nope'", id="hydra-del-unknown"),
    # enum choices and registries
    pytest.param(
        ["actor_rollout_ref.actor.strategy=deepspeed"],
        2,
        r"actor\.strategy='deepspeed' is not valid; choose one of: fsdp, megatron",
        id="enum-strategy",
    ),
    pytest.param(["actor_rollout_ref.actor.precision=fp8"], 2, r"actor\.precision='fp8' is not valid", id="precision"),
    pytest.param(["trainer.device=tpu"], 2, r"trainer\.device='tpu' is not valid; choose one of", id="device"),
    pytest.param(["trainer.logger=[neptune]"], 2, r"trainer\.logger\[0\]='neptune' is not valid", id="logger"),
    pytest.param(["data.truncation=middle"], 2, r"data\.truncation='middle' is not valid", id="truncation"),
    pytest.param(
        ["actor_rollout_ref.rollout.name=trtllm"], 2, r"rollout\.name='trtllm' is not valid", id="rollout-name"
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.name=sglang", "trainer.device=cpu"],
        2,
        r"rollout\.name=sglang needs SGLang on CUDA GPUs",
        id="rollout-sglang-on-cpu",
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"],
        2,
        r"tensor_model_parallel_size=2: the hf engine .* without tensor parallelism",
        id="rollout-hf-tp",
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
        2,
        r"tensor_model_parallel_size=3 must divide the actor's 2 workers",
        id="rollout-vllm-tp",
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.name=vllm"],
        2,
        r"rollout\.name=vllm needs vLLM, which is not installed: pip install 'hybridrl\[vllm\]'",
        id="rollout-vllm-missing",
        marks=pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here"),
    ),
    pytest.param(
        ["actor_rollout_ref.rollout.overlap=true"],
        2,
        r"overlap=true generates while the actor trains, so generation needs workers of its own: add "
        r"resource_pool\.pools\.rollout_pool",
        id="overlap-without-rollout-pool",
    ),
    pytest.param(
        ["+resource_pool.mapping.rollout=global_pool"],
        2,
        r"resource_pool\.mapping\.rollout=global_pool shares a pool with other roles",
        id="rollout-pool-shared",
    ),
    pytest.param(
        ["reward_model.reward_manager=batch"],
        2,
        r"reward_manager=batch calls a custom reward function once per batch: set custom_reward_function\.path",
        id="batch-manager-without-function",
    ),
    pytest.param(
        ["algorithm.rollout_correction.rollout_is=tokens"], 2, r"rollout_is='tokens' is not valid", id="rollout-is"
    ),
    pytest.param(["actor_rollout_ref.rollout.dtype=int8"], 2, r"rollout\.dtype='int8' is not valid", id="dtype"),
    pytest.param(["algorithm.adv_estimator=ppo2"], 2, r"algorithm\.adv_estimator='ppo2' is not valid", id="adv"),
    pytest.param(["algorithm.kl_penalty=k4"], 2, r"algorithm\.kl_penalty='k4' is not valid", id="kl-penalty"),
    pytest.param(["algorithm.kl_ctrl.type=pid"], 2, r"algorithm\.kl_ctrl\.type='pid' is not valid", id="kl-ctrl"),
    pytest.param(
        ["actor_rollout_ref.actor.fsdp.sharding_strategy=ZERO3"],
        2,
        r"fsdp\.sharding_strategy='ZERO3' is not valid",
        id="sharding",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.kl_loss_type=k9"], 2, r"actor\.kl_loss_type='k9' is not valid", id="kl-loss"
    ),
    pytest.param(["actor_rollout_ref.actor.loss_agg_mode=mean"], 2, r"actor\.loss_agg_mode='mean' is not", id="agg"),
    pytest.param(["critic.loss_agg_mode=sum"], 2, r"critic\.loss_agg_mode='sum' is not valid", id="critic-agg"),
    pytest.param(
        ["actor_rollout_ref.actor.policy_loss.loss_mode=dpo"],
        2,
        r"policy_loss\.loss_mode='dpo' is not valid; choose one of",
        id="loss-mode",
    ),
    pytest.param(["data.task=translate"], 2, r"data\.task='translate' is not valid; choose one of", id="task"),
    pytest.param(["reward.on_error=ignore"], 2, r"reward\.on_error='ignore' is not valid", id="on-error"),
    pytest.param(["reward_model.precision=fp16"], 2, r"reward_model\.precision=fp16 is not supported", id="rm-fp16"),
    pytest.param([f"{LAYOUT}.pp_schedule=zb"], 2, r"megatron\.pp_schedule='zb' is not valid", id="pp-schedule"),
    # batch sizes that do not fit each other
    pytest.param(
        ["data.train_batch_size=30"],
        2,
        r"actor\.ppo_mini_batch_size \(8\) must divide data\.train_batch_size \(30\)",
        id="batch-not-multiple",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.ppo_mini_batch_size=64"],
        2,
        r"actor\.ppo_mini_batch_size \(64\) must divide data\.train_batch_size \(16\)",
        id="mini-too-big",
    ),
    pytest.param(
        [GAE, "critic.ppo_mini_batch_size=7"], 2, r"critic\.ppo_mini_batch_size \(7\) must divide", id="critic-mini"
    ),
    pytest.param(
        ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=7"],
        2,
        r"actor\.ppo_micro_batch_size_per_gpu \(7\) must divide the per-worker mini-batch",
        id="micro",
    ),
    pytest.param(
        [GAE, "critic.ppo_micro_batch_size_per_gpu=7"],
        2,
        r"critic\.ppo_micro_batch_size_per_gpu \(7\) must divide",
        id="critic-micro",
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.GPU=3"],
        2,
        r"cannot be split evenly over the 3 workers of actor_rollout_ref\.actor",
        id="batch-over-workers",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.fsdp.shard_group_size=3"],
        2,
        r"actor\.fsdp\.shard_group_size \(3\) must divide the 2 workers",
        id="shard-group",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8"],
        2,
        r"actor\.ppo_max_token_len_per_gpu=8 is shorter than the longest sequence",
        id="token-budget",
    ),
    pytest.param(
        ["critic.use_dynamic_bsz=true", "critic.forward_max_token_len_per_gpu=4"],
        2,
        r"critic\.forward_max_token_len_per_gpu=4 is shorter",
        id="critic-token-budget",
    ),
    pytest.param(
        [
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4",
        ],
        2,
        r"rollout\.log_prob_max_token_len_per_gpu=4 is shorter",
        id="rollout-token-budget",
    ),
    pytest.param(
        [
            "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=4",
        ],
        2,
        r"ref\.log_prob_max_token_len_per_gpu=4 is shorter",
        id="ref-token-budget",
    ),
    # parallel layouts
    pytest.param(
        [MEGATRON, f"{LAYOUT}.tp_size=3"], 2, r"megatron\.tp_size=3 must divide the model's 4 attention heads", id="tp"
    ),
    pytest.param([MEGATRON, f"{LAYOUT}.pp_size=4"], 2, r"megatron\.pp_size=4 exceeds the model's 2 layers", id="pp"),
    pytest.param([MEGATRON, f"{LAYOUT}.tp_size=0"], 2, r"megatron: tp_size \(0\) and pp_size \(1\) must be", id="tp0"),
    pytest.param(
        [MEGATRON, f"{LAYOUT}.pp_size=2", f"{LAYOUT}.pp_microbatches=5"],
        2,
        r"megatron\.pp_microbatches \(5\) must divide",
        id="pp-microbatches",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.strategy={name: megatron, bogus: 1}"],
        2,
        r"actor\.strategy as a mapping takes 'name' and 'params'; got \['bogus'\]",
        id="strategy-mapping",
    ),
    pytest.param(
        ["trainer.parallel_config={foo: 1}"], 2, r"trainer\.parallel_config takes only 'megatron'", id="seed-layout"
    ),
    # options that do not fit each other
    pytest.param(
        ["actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo", MICRO_4],
        2,
        r"algorithm\.adv_estimator=grpo .*actor_rollout_ref\.rollout\.n \(1\) must be at least 2",
        id="grpo-n1",
    ),
    pytest.param(
        [
            GAE,
            "actor_rollout_ref.rollout.n=1",
            "algorithm.filter_groups.enable=true",
            MICRO_4,
            "critic.ppo_micro_batch_size_per_gpu=4",
        ],
        2,
        r"algorithm\.filter_groups\.enable=true .*rollout\.n >= 2 \(got 1\)",
        id="filter-n1",
    ),
    pytest.param(
        [GAE, "critic.enable=false"], 2, r"adv_estimator=gae needs a critic .*critic\.enable=false", id="gae-nocritic"
    ),
    pytest.param(
        ["critic.enable=true", "algorithm.adv_estimator=grpo"],
        2,
        r"critic\.enable=true, but algorithm\.adv_estimator=grpo does not use values",
        id="grpo-critic",
    ),
    pytest.param(
        ["trainer.resume_mode=resume_path"],
        2,
        r"trainer\.resume_mode=resume_path needs trainer\.resume_from_path",
        id="resume-path-missing",
    ),
    pytest.param(
        ["reward_model.enable=true"], 2, r"reward_model\.enable=true needs reward_model\.model\.path", id="rm-no-path"
    ),
    pytest.param(
        ["reward_model.enable=true", "reward_model.model.path={f}/model", "reward_model.max_length=1"],
        2,
        r"reward_model\.max_length \(1\) must be >= 2",
        id="rm-max-length",
    ),
]

CLI_FORMS = [
    pytest.param(["foo"], 2, r"Override 'foo' is not of the form key=value", id="no-equals"),
    pytest.param(["=1"], 2, r"Override '=1' is not of the form key=value", id="no-key"),
    pytest.param(["a.b="], 2, r"Unknown config key 'a'\.", id="no-value"),
    pytest.param(["data.train_batch_size"], 2, r"Override 'data\.train_batch_size' is not of the form", id="bare-key"),
    pytest.param(
        ["~data.train_batch_size=4"],
        2,
        r"Override '~data\.train_batch_size=4' is not of the form",
        id="hydra-del-value",
    ),
    pytest.param(["data.train_batch_size==8"], 2, r"'data\.train_batch_size': Value '=8'", id="double-equals"),
    pytest.param(["--config"], 2, r"--config needs a YAML file path", id="config-no-path"),
    pytest.param(["-c"], 2, r"--config needs a YAML file path", id="c-no-path"),
    pytest.param(
        ["--config", "{f}/missing.yaml"], 2, r"config file .*missing\.yaml: .*No such file", id="config-missing"
    ),
    pytest.param(["--config", "{f}/a_dir"], 2, r"Config file .*a_dir is a directory", id="config-dir"),
    pytest.param(
        ["--config", "{f}/dup.yaml"],
        2,
        r"dup\.yaml is not valid YAML at line 3, column 3: found duplicate key train_batch_size",
        id="yaml-duplicate-key",
    ),
    pytest.param(["-c", "{f}/syntax.yaml"], 2, r"syntax\.yaml is not valid YAML at line 2, column 1", id="yaml-syntax"),
    pytest.param(["--config", "{f}/tab.yaml"], 2, r"tab\.yaml is not valid YAML at line 2, column 1", id="yaml-tab"),
    pytest.param(["--config", "{f}/indent.yaml"], 2, r"indent\.yaml is not valid YAML at line 3", id="yaml-indent"),
    pytest.param(["--config", "{f}/unclosed.yaml"], 2, r"unclosed\.yaml is not valid YAML at line 2", id="yaml-open"),
    pytest.param(
        ["--config", "{f}/alias.yaml"], 2, r"alias\.yaml is not valid YAML .*undefined alias", id="yaml-alias"
    ),
    pytest.param(
        ["--config", "{f}/list.yaml"], 2, r"list\.yaml holds a list, not a mapping of sections", id="yaml-list"
    ),
    pytest.param(["--config", "{f}/badtype.yaml"], 2, r"'data\.train_batch_size': Value 'abc'", id="yaml-bad-type"),
    pytest.param(
        ["--config", "{f}/unknown.yaml"], 2, r"Unknown config key 'dtaa'\. Did you mean 'data'\?", id="yaml-key"
    ),
    pytest.param(["--config", "{f}/enum.yaml"], 2, r"actor\.strategy='deepspeed' is not valid", id="yaml-enum"),
    pytest.param(
        ["--config", "{f}/address.yaml"], 1, r"trainer\.ray\.address=headnode is not host:port", id="yaml-addr"
    ),
    pytest.param(
        ["--config", "{f}/locked.yaml"], 2, r"locked\.yaml: .*Permission denied", id="yaml-unreadable", marks=as_root
    ),
]

FILES = [
    pytest.param(
        ["data.train_files={f}/missing.parquet"],
        2,
        r"data\.train_files: .*missing\.parquet does not exist",
        id="train-files-missing",
    ),
    pytest.param(
        ["data.train_files=[{f}/good.parquet,{f}/missing.parquet]"],
        2,
        r"data\.train_files: .*missing\.parquet does not exist",
        id="train-files-list-missing",
    ),
    pytest.param(
        ["data.train_files={f}/good.parquet", "data.val_files={f}/missing.parquet"],
        2,
        r"data\.val_files: .*missing\.parquet does not exist",
        id="val-files-missing",
    ),
    pytest.param(
        ["data.val_files={f}/good.parquet"],
        2,
        r"data\.val_files is set but data\.train_files is not",
        id="val-without-train",
    ),
    pytest.param(
        ["data.train_files={f}/locked.parquet", TOK],
        1,
        r"locked\.parquet: cannot be read as parquet: .*Permission denied",
        id="train-files-unreadable",
        marks=as_root,
    ),
    pytest.param(
        ["data.train_files={f}/not.parquet", TOK],
        1,
        r"not\.parquet: cannot be read as parquet: .*magic bytes",
        id="not-parquet",
    ),
    pytest.param(
        ["data.train_files={f}/zero.parquet", TOK], 1, r"zero\.parquet: cannot be read as parquet", id="zero-bytes"
    ),
    pytest.param(
        ["data.train_files={f}/good.parquet", "data.val_files={f}/not.parquet", TOK],
        1,
        r"not\.parquet: cannot be read as parquet",
        id="val-not-parquet",
    ),
    pytest.param(
        ["data.train_files={f}/no_prompt.parquet", TOK],
        1,
        r"no_prompt\.parquet: row 0, column 'prompt': missing column",
        id="no-prompt-column",
    ),
    pytest.param(
        ["data.train_files={f}/good.parquet", "data.prompt_key=question", TOK],
        1,
        r"good\.parquet: row 0, column 'question': missing column",
        id="prompt-key-not-a-column",
    ),
    pytest.param(
        ["data.train_files={f}/no_reward_model.parquet", TOK],
        1,
        r"no_reward_model\.parquet: row 0, column 'reward_model': missing column",
        id="no-reward-model-column",
    ),
    pytest.param(
        ["data.train_files={f}/string_prompt.parquet", TOK],
        1,
        r"string_prompt\.parquet: row 0, column 'prompt': is a plain string",
        id="string-prompt",
    ),
    pytest.param(
        ["data.train_files={f}/no_ground_truth.parquet", TOK],
        1,
        r"no_ground_truth\.parquet: row 0, column 'reward_model': has no 'ground_truth'",
        id="no-ground-truth",
    ),
    pytest.param(
        ["data.train_files={f}/empty_source.parquet", TOK],
        1,
        r"empty_source\.parquet: row 0, column 'data_source': must be a non-empty string",
        id="empty-data-source",
    ),
    pytest.param(
        ["data.train_files={f}/long_prompts.parquet", TOK],
        1,
        r"All 40 prompts in .*long_prompts\.parquet.* filtered out: raise data\.max_prompt_length",
        id="all-prompts-too-long",
    ),
    pytest.param(
        ["data.train_files={f}/long_prompts.parquet", "data.filter_overlong_prompts=false", TOK],
        1,
        r"long_prompts\.parquet: row 0, column 'prompt': .*raise data\.max_prompt_length",
        id="prompt-too-long",
    ),
    pytest.param(
        ["data.train_files={f}/good.parquet", "actor_rollout_ref.model.path={f}/no_template"],
        1,
        r"The tokenizer .*no_template'\) has no chat template",
        id="tokenizer-without-chat-template",
    ),
    pytest.param(
        ["trainer.output_dir={f}/notes/run"],
        2,
        r"trainer\.output_dir=.*notes/run: .*notes is a file, not a directory",
        id="output-dir-under-file",
    ),
    pytest.param(
        ["trainer.output_dir={f}/notes"],
        2,
        r"trainer\.output_dir=.*notes: .*notes is a file, not a directory",
        id="output-dir-is-file",
    ),
    pytest.param(
        ["trainer.output_dir={f}/read_only/run"],
        2,
        r"trainer\.output_dir=.*read_only/run: .*read_only is not writable",
        id="output-dir-read-only",
        marks=as_root,
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/no_model"],
        2,
        r"actor_rollout_ref\.model\.path: .*no_model is not a directory",
        id="model-missing",
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/notes"],
        2,
        r"actor_rollout_ref\.model\.path: .*notes is not a directory",
        id="model-is-file",
    ),
    pytest.param(
        ["actor_rollout_ref.model.tokenizer_path={f}/no_tokenizer"],
        2,
        r"actor_rollout_ref\.model\.tokenizer_path: .*no_tokenizer is not a directory",
        id="tokenizer-missing",
    ),
    pytest.param(
        ["critic.model.path={f}/no_critic"],
        2,
        r"critic\.model\.path: .*no_critic is not a directory",
        id="critic-model",
    ),
    pytest.param(
        ["trainer.resume_mode=sideways"],
        1,
        r"Cannot resume from sideways: .*trainer\.resume_mode=auto",
        id="resume-mode-unknown",
    ),
    pytest.param(
        ["trainer.resume_mode=resume_path", "trainer.resume_from_path={f}/a_dir"],
        1,
        r"Cannot resume from .*a_dir: it is not a complete checkpoint \(no trainer_state\.json\)",
        id="resume-from-not-a-checkpoint",
    ),
]

CLUSTER = [
    pytest.param(["trainer.ray.address=headnode"], 1, r"trainer\.ray\.address=headnode is not host:port", id="addr"),
    pytest.param(
        ["trainer.ray.address=127.0.0.1:notaport"], 1, r"address=127\.0\.0\.1:notaport is not host:port", id="port"
    ),
    pytest.param(["trainer.ray.address=:6379"], 1, r"trainer\.ray\.address=:6379 is not host:port", id="no-host"),
    pytest.param(
        ["trainer.ray.address=127.0.0.1:1"],
        1,
        r"Nothing answers at trainer\.ray\.address=127\.0\.0\.1:1 .*refused",
        id="unreachable",
    ),
    pytest.param(
        ["trainer.ray.address=ray://127.0.0.1:1"],
        1,
        r"Nothing answers at trainer\.ray\.address=ray://127\.0\.0\.1:1",
        id="unreachable-client",
    ),
    pytest.param(
        ["trainer.ray.connect_timeout_s=-1"], 2, r"trainer\.ray\.connect_timeout_s=-1\.0 must be", id="connect"
    ),
    pytest.param(["trainer.ray.start_timeout_s=-5"], 2, r"trainer\.ray\.start_timeout_s=-5\.0 must be", id="start"),
    pytest.param(["trainer.ray.call_timeout_s=0"], 2, r"trainer\.ray\.call_timeout_s=0\.0 must be positive", id="call"),
    pytest.param(
        ["trainer.ray.liveness_timeout_s=-1"], 2, r"trainer\.ray\.liveness_timeout_s=-1\.0 must", id="liveness"
    ),
    pytest.param(
        ["resource_pool.mapping.actor_rollout=nopool"],
        2,
        r"resource_pool: Role 'actor_rollout' is mapped to pool 'nopool', which is not defined",
        id="pool-undefined",
    ),
    pytest.param(
        ["resource_pool.mapping.judge=global_pool"],
        2,
        r"resource_pool\.mapping has unknown role 'judge'",
        id="pool-role-unknown",
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.GPU=-1"], 2, r"Pool 'global_pool': resource GPU=-1\.0 must not", id="gpu-neg"
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.GPU=1.5"], 2, r"Pool 'global_pool': GPU=1\.5 must be", id="gpu-frac"
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.GPU=two"], 2, r"Pool 'global_pool': resource amounts must be", id="gpu-str"
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.strategy=RANDOM"],
        2,
        r"Pool 'global_pool': strategy='RANDOM'; choose one of PACK",
        id="pool-strategy",
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.workers=3"],
        2,
        r"Pool 'global_pool': a GPU pool has one worker per GPU; got GPU=2 and workers=3",
        id="pool-workers",
    ),
    pytest.param(
        ["resource_pool.pools={p: {CPU: 0}}", CPU_POOL], 2, r"Pool 'p' asks for no GPU and no CPU", id="pool-empty"
    ),
    pytest.param(
        ["resource_pool.pools={p: {CPU: 2, workers: 0}}", CPU_POOL],
        2,
        r"Pool 'p': workers=0 must be at least 1",
        id="pool-no-workers",
    ),
    pytest.param(
        ["resource_pool.pools.global_pool.gpu_group=-1"],
        2,
        r"Pool 'global_pool': resource gpu_group=-1\.0 must not be negative",
        id="pool-label-negative",
    ),
]

REWARD_FILES = [
    pytest.param(
        ["custom_reward_function.path={f}/missing.py"],
        2,
        r"custom_reward_function: Custom reward file .*missing\.py' does not exist",
        id="reward-missing",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/a_dir"],
        2,
        r"custom_reward_function: Custom reward path .*a_dir' is not a file",
        id="reward-dir",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/locked.py"],
        2,
        r"custom_reward_function: Cannot read the custom reward file .*locked\.py'.*Permission denied",
        id="reward-unreadable",
        marks=as_root,
    ),
    pytest.param(
        ["custom_reward_function.path={f}/syntax.py"],
        2,
        r"custom_reward_function: .*syntax\.py' is not valid Python: .* at line 1",
        id="reward-syntax-error",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/signature.py"],
        2,
        r"custom_reward_function: .*'compute_score' in .*signature\.py' has the signature compute_score\(solution\)",
        id="reward-wrong-signature",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/other_name.py"],
        2,
        r"custom_reward_function: .*other_name\.py' defines no 'compute_score'; functions found: \['other'\]",
        id="reward-name-not-defined",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/other_name.py", "custom_reward_function.name=my_score"],
        2,
        r"other_name\.py' defines no 'my_score'",
        id="reward-custom-name-not-defined",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/not_callable.py"],
        1,
        r"'compute_score' in custom reward file .*not_callable\.py' is a value of type int, not a function",
        id="reward-not-callable",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/import_error.py"],
        1,
        r"Importing the custom reward file .*import_error\.py' failed: ModuleNotFoundError",
        id="reward-import-error",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/raises.py"],
        1,
        r"Importing the custom reward file .*raises\.py' failed: RuntimeError: boom at import",
        id="reward-raises-at-import",
    ),
    pytest.param(
        ["custom_reward_function.path={f}/exits.py"],
        1,
        r"Importing the custom reward file .*exits\.py' failed: SystemExit: 3",
        id="reward-exits-at-import",
    ),
]

# These fail only once the worker groups run: each starts a local Ray cluster (~15 s on two cores).
# One step on one worker of the session's shared cluster: these rows are about the reward's failure, found
# at the first step's scoring, not about the workers.
RAY_SMALL = ["trainer.total_steps=1", "trainer.ray.address={ray}", "resource_pool.pools.global_pool.GPU=1"]
FOUND_BEFORE_RAY = [  # once found only after the workers started (~20 s): now before Ray
    pytest.param(
        ["data.task=lookup"],
        2,
        r"agent_name.*multi_turn\.enable=false: set it to true and multi_turn\.tool_config_path",
        id="tool-task-without-multi-turn",
    ),
    pytest.param(
        ["data.task=lookup", "actor_rollout_ref.rollout.multi_turn.enable=true"],
        2,
        r"multi_turn\.tool_config_path is not set",
        id="tool-task-without-tools",
    ),
    pytest.param(
        [
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.stop_after_tool_call=true",
        ],
        2,
        r"stop_after_tool_call=true needs </tool_call> to be one token",
        id="stop-after-call-without-call-token",
    ),
    pytest.param(
        [
            "data.task=lookup",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.tool_config_path={f}/tools_mcp.yaml",
        ],
        2,
        r"Tool config .*tools_mcp\.yaml \(actor_rollout_ref\.rollout\.multi_turn\.tool_config_path\): .*MCP",
        id="tool-config-mcp",
    ),
    pytest.param(
        [
            "data.task=lookup",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.tool_config_path={f}/tools_missing_class.yaml",
        ],
        2,
        r"\(actor_rollout_ref\.rollout\.multi_turn\.tool_config_path\): .*hybridrl_no_such",
        id="tool-class-not-importable",
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/no_weights"],
        2,
        r"actor_rollout_ref\.model\.path: .*no_weights has no \*\.safetensors weights",
        id="model-without-weights",
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/no_config"],
        2,
        r"actor_rollout_ref\.model\.path: .*no_config has no config\.json",
        id="model-without-config",
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/model_no_tokenizer"],
        2,
        r"actor_rollout_ref\.model\.path: .*model_no_tokenizer has no tokenizer files",
        id="model-without-tokenizer",
    ),
    pytest.param(
        ["actor_rollout_ref.model.path={f}/a_dir"], 2, r"model\.path: .*a_dir has no config\.json", id="model-empty"
    ),
    pytest.param(
        ["critic.model.path={f}/no_weights"],
        2,
        r"critic\.model\.path: .*has no \*\.safetensors",
        id="critic-no-weights",
    ),
    pytest.param(
        ["data.train_files={f}/unknown_source.parquet", TOK],
        2,
        r"No reward function for data_source \['my/dataset'\] .*custom_reward_function\.path",
        id="data-source-without-reward",
    ),
    pytest.param(
        [
            "data.train_files={f}/good.parquet",
            TOK,
            "data.train_batch_size=64",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "critic.ppo_mini_batch_size=16",
        ],
        2,
        r"data\.train_batch_size=64 is larger than the 40 training prompts",
        id="batch-larger-than-dataset",
    ),
    pytest.param(
        ["data.train_files={f}/empty.parquet", TOK],
        1,
        r"data\.train_files=.*empty\.parquet.* holds no prompts",
        id="empty-parquet",
    ),
    pytest.param(
        ["actor_rollout_ref.model.tokenizer_path={f}/a_dir"],
        2,
        r"model\.tokenizer_path: .*a_dir has no tokenizer files",
        id="tokenizer-dir-empty",
    ),
    pytest.param(["data.train_files=[]"], 2, r"data\.train_files is empty", id="no-train-files"),
    pytest.param(["data.train_files={f}/a_dir"], 2, r"data\.train_files: .*a_dir is a directory", id="train-files-dir"),
    # values the workers (AdamW, the model) would refuse only after start-up
    pytest.param(["actor_rollout_ref.actor.optim.eps=-1"], 2, r"optim\.eps=-1\.0 .* must be >= 0", id="eps"),
    pytest.param(
        ["critic.optim.betas=[1.5,0.9]"], 2, r"critic\.optim\.betas=\[1\.5, 0\.9\] must be two", id="betas-range"
    ),
    pytest.param(["critic.optim.weight_decay=-1"], 2, r"critic\.optim\.weight_decay=-1\.0 must be >= 0", id="decay"),
    pytest.param(
        ["actor_rollout_ref.model.tiny.hidden_size=0"], 2, r"tiny\.hidden_size=0 must be >= 1", id="tiny-width"
    ),
    pytest.param(
        ["actor_rollout_ref.model.tiny.num_hidden_layers=0"], 2, r"tiny\.num_hidden_layers=0", id="tiny-depth"
    ),
    pytest.param(
        ["actor_rollout_ref.model.tiny.num_attention_heads=3"], 2, r"num_attention_heads=3 must divide", id="tiny-heads"
    ),
    pytest.param(
        ["actor_rollout_ref.model.tiny.num_key_value_heads=3"], 2, r"num_key_value_heads=3 must divide", id="tiny-kv"
    ),
    # once accepted without a word
    pytest.param(["actor_rollout_ref.rollout.top_p=1.5"], 2, r"rollout\.top_p=1\.5 must lie in \(0, 1\]", id="top-p"),
    pytest.param(["actor_rollout_ref.rollout.top_p=0"], 2, r"rollout\.top_p=0\.0 must lie", id="top-p-zero"),
    pytest.param(["actor_rollout_ref.rollout.top_k=-2"], 2, r"rollout\.top_k=-2 must be >= 0", id="top-k"),
    pytest.param(
        ["actor_rollout_ref.rollout.val_kwargs.do_sample=true", "actor_rollout_ref.rollout.val_kwargs.temperature=0"],
        2,
        r"val_kwargs\.temperature=0\.0 must be > 0",
        id="val-temperature",
    ),
    pytest.param(
        ["actor_rollout_ref.actor.grad_clip=-1"], 2, r"actor\.grad_clip=-1\.0 must be positive", id="grad-clip"
    ),
    pytest.param(
        ["actor_rollout_ref.actor.entropy_coeff=nan"], 2, r"entropy_coeff=nan must be a finite", id="entropy-nan"
    ),
    pytest.param(["actor_rollout_ref.actor.kl_loss_coef=-1"], 2, r"kl_loss_coef=-1\.0 must be >= 0", id="kl-loss"),
    pytest.param(["algorithm.kl_ctrl.kl_coef=-1"], 2, r"kl_ctrl\.kl_coef=-1\.0 must be >= 0", id="kl-coef"),
    pytest.param(["algorithm.kl_ctrl.horizon=0"], 2, r"kl_ctrl\.horizon=0 must be positive", id="kl-horizon"),
    pytest.param(["algorithm.kl_ctrl.target_kl=-1"], 2, r"kl_ctrl\.target_kl=-1\.0 must be positive", id="kl-target"),
    pytest.param(["critic.cliprange_value=-1"], 2, r"critic\.cliprange_value=-1\.0 must be positive", id="cliprange"),
    pytest.param(["trainer.straggler_min_seconds=-1"], 2, r"straggler_min_seconds=-1\.0 must be >= 0", id="straggler"),
    pytest.param(["trainer.max_ckpt_to_keep=0"], 2, r"max_ckpt_to_keep=0 must be >= 1, or null", id="keep-zero"),
    pytest.param(["reward.failure_score=nan"], 2, r"reward\.failure_score=nan must be a finite", id="failure-nan"),
    pytest.param(["reward_model.weight=nan"], 2, r"reward_model\.weight=nan must be a finite", id="rm-weight-nan"),
    pytest.param(
        ["trainer.ray.dashboard_host=not a host"], 2, r"dashboard_host='not a host' is not a host", id="dash-host"
    ),
    pytest.param(["trainer.ray.num_cpus=-2"], 2, r"trainer\.ray\.num_cpus=-2 must be >= 1", id="num-cpus"),
    pytest.param(["trainer.ray.object_store_memory=-1"], 2, r"object_store_memory=-1 bytes is below", id="store-size"),
    pytest.param(
        ["trainer.ray.working_dir={f}/nope"],
        2,
        r"trainer\.ray\.working_dir=.*nope is not a directory",
        id="working-dir",
    ),
    pytest.param(["reward.timeout_s=0"], 2, r"reward\.timeout_s=0\.0 > 0", id="reward-timeout"),
    pytest.param(["reward.num_workers=-1"], 2, r"reward\.num_workers=-1 must be >= 0", id="reward-workers"),
    pytest.param(["trainer.max_restarts=-1"], 2, r"trainer\.max_restarts=-1 must be >= 0", id="restarts"),
    pytest.param(["trainer.ray.liveness_timeout_s=-1"], 2, r"liveness_timeout_s=-1\.0 must be >= 0", id="liveness"),
    pytest.param(
        ["actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=2"],
        2,
        r"lr_warmup_steps_ratio=2\.0 .* \[0, 1\]",
        id="warmup",
    ),
    pytest.param(
        ["critic.optim.lr_scheduler_type=linear"], 2, r"lr_scheduler_type='linear' is not valid", id="scheduler"
    ),
    pytest.param(["critic.optim.num_cycles=0"], 2, r"critic\.optim\.num_cycles=0\.0 must be positive", id="cycles"),
    pytest.param(["trainer.critic_warmup=-1"], 2, r"trainer\.critic_warmup=-1 must be >= 0", id="critic-warmup"),
    # the command line and the YAML reader
    pytest.param(
        ["data.train_batch_size=[1"],
        2,
        r"Override data\.train_batch_size=\[1: the value is not valid YAML",
        id="yaml-value",
    ),
    pytest.param(
        ["trainer.total_steps=${oops}"],
        2,
        r"Could not resolve config key 'trainer\.total_steps': .*'oops'",
        id="interp",
    ),
    pytest.param(
        ["trainer.ray.env_vars=[a]"],
        2,
        r"'trainer\.ray\.env_vars': a list where the schema has a mapping",
        id="list-for-map",
    ),
    pytest.param(["data=3"], 2, r"Bad value for a config section: .*A section takes a mapping", id="section-scalar"),
    pytest.param(
        ["data..train_batch_size=8"], 2, r"Override 'data\.\.train_batch_size=8' is not of the form", id="double-dot"
    ),
    pytest.param(
        ["data.task_kwargs={num_digits: 0}"],
        2,
        r"data\.task_kwargs=\{'num_digits': 0\}: num_digits=0",
        id="task-kwargs",
    ),
    pytest.param(["--config", "{f}/binary.yaml"], 2, r"binary\.yaml is not UTF-8 text", id="config-binary"),
    pytest.param(["--config", "{f}/scalar.yaml"], 2, r"scalar\.yaml holds a number, not a mapping", id="config-scalar"),
    pytest.param(["--config", "{f}/words.yaml"], 2, r"words\.yaml holds a string, not a mapping", id="config-text"),
    pytest.param(
        ["--config", "trainer.total_steps=3"], 2, r"--config needs a YAML file path, before", id="config-override"
    ),
    pytest.param(
        ["trainer.total_steps=3", "--config", "x.yaml"],
        2,
        r"'--config' is not an override: options come first",
        id="config-late",
    ),
]
# Reward code that misbehaves at run time: one line naming the function and the sample (or the deadline).
MISBEHAVING_REWARD = {
    "segfault.py": "import ctypes\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    ctypes.string_at(0)\n",
}
REWARD = "custom_reward_function.path={f}/run_time/"
# A whole run carries a reward's failure to the user's one line: here a child process that dies (one that does
# not return is tests/trainer/test_faults.py's run, which also checks that no reward process is left). Each
# misbehaviour's own message (raises, exits, a string, nan, None) is checked on the scorer that makes it, without
# a run (tests/rewards: test_processes, test_rewards); the run passes any of them on alike.
NEEDS_RAY = [
    pytest.param(
        [REWARD + "segfault.py", *RAY_SMALL],
        1,
        r"sample 0 .* died \(killed by SIGSEGV\)",
        id="reward-segfault",
        marks=ray_run,
    ),
]


def _argv(args: list[str], files: Path, run_dir: Path, request: pytest.FixtureRequest) -> list[str]:
    """The row's arguments after the defaults that keep a run out of the repository; ``--config FILE``
    stays first, where the entry point looks for it."""
    args = [a.replace("{f}", str(files)) for a in args]
    if any("{ray}" in a for a in args):
        address = request.getfixturevalue("shared_ray")
        args = [a.replace("{ray}", address) for a in args]
    base = [f"trainer.output_dir={run_dir}", "trainer.logger=[jsonl]", "trainer.ray.include_dashboard=false"]
    if args[0] in ("--config", "-c"):
        return args if len(args) == 1 else [*args[:2], *base, *args[2:]]
    return [*base, *args]


@contextlib.contextmanager
def ray_logs_to_stderr() -> Iterator[None]:
    """Ray's log handler writes to the ``sys.stderr`` of the moment ray was imported: in a test session, the
    capture of whichever test imported it first, closed once that test ended. Point it at the current one, as
    it points at the terminal in a command-line run, so that Ray's own lines are checked too."""
    ray_logger = logging.getLogger("ray")  # pytest adds its own capturing handlers there too: leave those
    handlers = [h for h in ray_logger.handlers if type(h).__module__.startswith("ray.")]
    streams = [h.stream for h in handlers]
    for handler in handlers:
        handler.stream = sys.stderr  # not setStream: it flushes the old stream, which may be closed
    try:
        yield
    finally:
        for handler, stream in zip(handlers, streams):
            handler.stream = stream


@pytest.mark.parametrize(
    "args,code,message", CONFIG_VALUES + CLI_FORMS + FILES + CLUSTER + REWARD_FILES + FOUND_BEFORE_RAY + NEEDS_RAY
)
def test_a_bad_input_gets_one_line(args, code, message, bad_files, tmp_path, caplog, capsys, request):
    argv = _argv(args, bad_files, tmp_path / "run", request)
    with caplog.at_level(logging.ERROR, logger="hybridrl"), ray_logs_to_stderr():
        got = main(argv)
    out, err = capsys.readouterr()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    lines = [r.getMessage() for r in errors]
    assert (got, len(lines)) == (code, 1), lines
    assert "\n" not in lines[0] and errors[0].exc_info is None, lines[0]
    assert re.search(message, lines[0]), lines[0]
    assert "Traceback" not in out + err + caplog.text
