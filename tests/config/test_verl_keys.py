"""verl's key list: every leaf key of verl's ppo_trainer.yaml either is a hybridrl key (same name, verl's
meaning) or has a one-line answer; every answer is of a known kind and names real keys; no rule is dead."""

from __future__ import annotations

import re
from pathlib import Path

from hybridrl.config.compat.verl.keys import VERL_ANSWERS, VERL_KEYS, verl_answer
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
    left_over = [k for k in VERL_KEYS if k not in HYBRIDRL_KEYS and verl_answer(k) is None]
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
    needs_answer = [k for k in VERL_KEYS if k not in HYBRIDRL_KEYS or k in COMING_TO_THE_SCHEMA]
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
    assert verl_answer("trainer.default_local_dir") == next(
        a for p, a in VERL_ANSWERS if p == "trainer.default_local_dir"
    )
    assert verl_answer("trainer.default_local_dir.x") is None
    assert verl_answer("no.such.key") is None


def test_the_docs_table_shows_every_rule_in_order():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md").read_text()
    section = doc.split("\n## Coming from verl\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    table = [
        tuple(cell.strip().replace("`", "").replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row)[1:3])
        for row in rows
    ]
    assert table == list(VERL_ANSWERS), "docs/CONFIG.md's 'Coming from verl' table differs from VERL_ANSWERS"
    same = sum(key in set(leaf_keys(Config)) for key in VERL_KEYS)
    counts = f"{same} of the {len(VERL_KEYS)} keys work unchanged"
    assert counts in " ".join(section.split()), f"docs/CONFIG.md's 'Coming from verl' should say: {counts}"
    rules = f"The other {len(VERL_KEYS) - same} keys are answered by the {len(VERL_ANSWERS)} rules below"
    assert rules in " ".join(section.split()), f"docs/CONFIG.md's 'Coming from verl' should say: {rules}"
