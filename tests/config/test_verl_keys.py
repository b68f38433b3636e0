"""verl's key list: every leaf key of verl's ppo_trainer.yaml either is a hybridrl key (same name, verl's
meaning) or has a one-line answer; every answer is of a known kind and names real keys; no rule is dead."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridrl.config.compat.verl.keys import (
    RENAMES,
    SCRIPT_KEYS,
    VERL_ANSWERS,
    VERL_KEYS,
    RuleKind,
    verl_answer,
    verl_rule,
)
from hybridrl.config.compat.verl.render import render_section
from hybridrl.config.loader import ConfigError, load_config
from hybridrl.config.schema import Config
from tests.config.test_schema import USER_DICTS, leaf_keys

HYBRIDRL_KEYS = set(leaf_keys(Config))
KINDS = ("use ", "not supported yet: ", "not needed in hybridrl: ")
# verl keys hybridrl's schema is about to take under verl's name; their rules stay as the answer until then
# and are not dead while these keys are still unknown.
COMING_TO_THE_SCHEMA: set[str] = set()  # keys about to join the schema, whose rules may then go


def matches(pattern: str, key: str) -> bool:
    if pattern.endswith(".*"):
        return key == pattern[:-2] or key.startswith(pattern[:-1])
    return key == pattern


def is_hybridrl_key(name: str) -> bool:
    """A leaf key, a section (a prefix of leaf keys), or a key inside one of the user dicts."""
    return (
        name in HYBRIDRL_KEYS
        or any(k.startswith(name + ".") for k in HYBRIDRL_KEYS)
        or any(name.startswith(d + ".") for d in USER_DICTS)
    )


def test_the_key_list_is_verls_whole_list():
    assert len(VERL_KEYS) == 556
    assert len(set(VERL_KEYS)) == len(VERL_KEYS)
    assert list(VERL_KEYS) == sorted(VERL_KEYS)


def test_every_verl_key_works_or_has_an_answer():
    left_over = [k for k in (*VERL_KEYS, *SCRIPT_KEYS) if k not in HYBRIDRL_KEYS and verl_answer(k) is None]
    assert not left_over, f"verl keys neither in the schema nor answered: {left_over}"


def test_every_answer_is_one_line_of_a_known_kind():
    bad = [(p, a) for p, a in VERL_ANSWERS if "\n" in a or not a.startswith(KINDS) or len(a) > 120]
    assert not bad, f"answers must be one line (<= 120 chars) starting with one of {KINDS}: {bad}"


def test_every_use_answer_names_a_hybridrl_key():
    wrong = []
    for pattern, answer in VERL_ANSWERS:
        if answer.startswith("use "):
            name = answer[len("use ") :].split()[0].rstrip(",").split("=")[0]
            if not is_hybridrl_key(name):
                wrong.append((pattern, name))
    assert not wrong, f"'use X' answers whose X is not a hybridrl key or section: {wrong}"


def test_no_rule_is_dead():
    """Each rule is the first match of at least one verl key that needs an answer."""
    needs_answer = [k for k in (*VERL_KEYS, *SCRIPT_KEYS) if k not in HYBRIDRL_KEYS or k in COMING_TO_THE_SCHEMA]
    used = {next(p for p, _ in VERL_ANSWERS if matches(p, k)) for k in needs_answer if verl_answer(k)}
    dead = [p for p, _ in VERL_ANSWERS if p not in used]
    assert not dead, f"rules that answer no verl key (or only keys an earlier rule answers): {dead}"
    patterns = [p for p, _ in VERL_ANSWERS]
    assert len(set(patterns)) == len(patterns)


def test_patterns_are_keys_or_subtrees():
    for pattern, _ in VERL_ANSWERS:
        key = pattern.removesuffix(".*")
        assert "*" not in key, pattern
        assert key in COMING_TO_THE_SCHEMA or not is_hybridrl_key(key), f"{pattern} covers a hybridrl key"


def test_a_subtree_rule_covers_the_key_itself_and_sub_keys():
    assert verl_answer("global_profiler") == verl_answer("global_profiler.tool")
    assert verl_answer("data.apply_chat_template_kwargs.enable_thinking") is not None
    assert verl_answer("trainer.use_legacy_worker_impl") == next(
        a for p, a in VERL_ANSWERS if p == "trainer.use_legacy_worker_impl"
    )
    assert verl_answer("trainer.use_legacy_worker_impl.x") is None
    assert verl_answer("no.such.key") is None


def test_the_docs_section_is_rendered_from_the_rules():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md").read_text()
    section = "## Coming from verl\n" + doc.split("\n## Coming from verl\n", 1)[1]
    assert section == render_section(), (
        "docs/CONFIG.md's 'Coming from verl' differs from the rules: regenerate it with "
        "python -m hybridrl.config.compat.verl.render (it is the page's last section)"
    )


def test_every_rename_is_a_rule_onto_a_hybridrl_key_with_valid_values():
    patterns = {p for p, _ in VERL_ANSWERS}
    for verl_key, (target, values) in RENAMES.items():
        assert verl_key in patterns, f"rename {verl_key} has no rule (and so no answer in the docs)"
        assert target in HYBRIDRL_KEYS, f"rename {verl_key} -> {target}: not a hybridrl key"
        for verl_value, ours in (values or {verl_key: None}).items():
            if values is None:
                continue
            load_config([f"{target}={str(ours).lower() if isinstance(ours, bool) else ours}"])  # a valid value
            assert verl_rule(verl_key).apply(verl_key, verl_value).target == target


def test_off_values_are_accepted_and_others_refused():
    ulysses = "reward_model.ulysses_sequence_parallel_size"  # the actor's, ref's and critic's are taken
    assert verl_rule(ulysses).apply(ulysses, 1).refusal is None  # verl's default: off there too
    assert "Ulysses" in verl_rule(ulysses).apply(ulysses, 2).refusal
    lora = "critic.model.lora_rank"  # the actor's is hybridrl's own key
    assert verl_rule(lora).apply(lora, 0).refusal is None
    assert verl_rule(lora).apply(lora, None).refusal is None
    assert "LoRA" in verl_rule(lora).apply(lora, 32).refusal
    legacy = "trainer.use_legacy_worker_impl"
    assert verl_rule(legacy).kind == RuleKind.IGNORED
    assert verl_rule(legacy).apply(legacy, "disable").refusal is None


def test_verl_ulysses_keys_move_to_the_roles():
    cfg = load_config(
        [
            "actor_rollout_ref.model.use_remove_padding=True",
            "critic.model.use_remove_padding=True",
            "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
            "critic.model.fsdp_config.ulysses_sequence_parallel_size=2",
        ]
    )
    assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2
    assert cfg.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2  # follows the actor's, as in verl
    assert cfg.critic.ulysses_sequence_parallel_size == 2


def test_verl_fsdp_config_sections_and_off_values_load_as_written(caplog):
    with caplog.at_level("INFO", logger="hybridrl"):
        cfg = load_config(
            [
                "actor_rollout_ref.actor.fsdp_config.param_offload=True",
                "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
                "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=False",
                "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
                "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
                "actor_rollout_ref.actor.fsdp_config.fsdp_size=-1",
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
                "actor_rollout_ref.actor.ppo_micro_batch_size=null",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size=null",
                "actor_rollout_ref.ref.fsdp_config.param_offload=True",
                "critic.model.fsdp_config.param_offload=True",
                "critic.model.fsdp_config.optimizer_offload=True",
                "trainer.use_legacy_worker_impl=auto",
                "actor_rollout_ref.rollout.mode=async",
                "data.return_raw_chat=True",
                "actor_rollout_ref.rollout.multi_turn.format=hermes",
            ]
        )
    actor = cfg.actor_rollout_ref.actor
    assert actor.fsdp.param_offload and actor.fsdp.optimizer_offload
    assert actor.fsdp.sharding_strategy == "SHARD_GRAD_OP" and actor.fsdp.model_dtype == "bfloat16"
    assert actor.strategy == "fsdp"
    assert cfg.actor_rollout_ref.ref.param_offload
    assert cfg.critic.fsdp.param_offload and cfg.critic.fsdp.optimizer_offload
    assert "actor_rollout_ref.actor.fsdp_config.param_offload=True -> actor_rollout_ref.actor.fsdp.param_offload" in (
        caplog.text
    )
    assert "trainer.use_legacy_worker_impl=auto" in caplog.text  # accepted, and said once


def test_every_refusal_comes_at_once_each_with_its_answer():
    with pytest.raises(ConfigError) as info:
        load_config(
            [
                "critic.model.lora_rank=8",
                "critic.model.fsdp_config.fsdp_size=4",
                "reward_model.ulysses_sequence_parallel_size=2",
                "trainer.total_stepz=3",
                "data.train_batch_size=abc",
            ]
        )
    lines = str(info.value).splitlines()
    assert lines[0].startswith("5 config problems"), lines
    assert any("lora_rank=8" in line and "LoRA" in line for line in lines)
    assert any(
        "critic.model.fsdp_config.fsdp_size=4" in line and "critic.fsdp.shard_group_size" in line for line in lines
    )
    assert any("reward_model.ulysses_sequence_parallel_size=2" in line and "Ulysses" in line for line in lines)
    assert any("'trainer.total_stepz'. Did you mean 'trainer.total_steps'" in line for line in lines)
    assert any("'data.train_batch_size'" in line for line in lines)


def test_the_nested_verl_key_is_answered_not_its_section():
    with pytest.raises(ConfigError, match=r"'actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=100'"):
        load_config(["actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params=100"])
