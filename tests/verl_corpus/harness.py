"""Run verl's own example scripts through hybridrl: bash expands each script as a verl user's shell would,
with ``python3``/``python`` shims that record the ``-m verl.trainer.main_ppo`` command line instead of
running it; one substitution table then swaps paths and sizes for a tiny CPU run, and nothing else."""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "scripts"
CORPUS = HERE / "corpus.yaml"
SUBSTITUTIONS = HERE / "substitutions.yaml"
VERL_FILES = HERE / "verl_files"  # verl's own files some scripts read from the checkout they run in

ENTRIES = ("verl.trainer.main_ppo", "recipe.dapo.main_dapo")  # the DAPO recipe runs the same trainer
RECORD_VAR = "VERL_CORPUS_RECORD"

# What the python shim runs (with the real interpreter): record a verl trainer launch, do nothing else.
_RECORDER = f"""\
import json, os, sys
args = sys.argv[1:]
if args[:1] == ['-m'] and args[1:2] and args[1] in {ENTRIES!r}:
    with open(os.environ[{RECORD_VAR!r}], "a") as f:
        f.write(json.dumps(args[2:]) + "\\n")
"""

# Tools verl's scripts call besides python: each stub prints nothing and succeeds, so a script goes on to
# its trainer launch as it would on the machine it was written for.
STUBS = ("nvidia-smi", "ray", "hdfs", "huggingface-cli", "conda", "srun", "scontrol", "sbatch", "wandb", "pip")


class HarnessError(RuntimeError):
    """A script did not yield a verl command line, or the table cannot be applied to one."""


def load_corpus(path: Path = CORPUS) -> list[dict[str, Any]]:
    """The corpus entries (one per stored script), in file order."""
    return list(yaml.safe_load(path.read_text())["scripts"])


def load_table(path: Path = SUBSTITUTIONS) -> dict[str, Any]:
    """The one substitution table: ``replace`` (key -> value), ``append`` (key=value lines) and ``env``."""
    table = yaml.safe_load(path.read_text())
    table.setdefault("replace", {})
    table.setdefault("append", [])
    table.setdefault("env", {})
    return table


def _write_shims(bin_dir: Path) -> None:
    recorder = bin_dir / "record_verl_launch.py"
    recorder.write_text(_RECORDER)
    python = f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S {shlex.quote(str(recorder))} "$@"\n'
    for name, text in [("python3", python), ("python", python)] + [(s, "#!/bin/sh\nexit 0\n") for s in STUBS]:
        shim = bin_dir / name
        shim.write_text(text)
        shim.chmod(0o755)


def verl_argv(script: Path, home: Path, env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> list[str]:
    """The arguments ``script`` passes to ``python3 -m verl.trainer.main_ppo`` (its last such launch), when
    bash runs it with HOME=home (also its working directory) and ``env`` (the table's ``env``) set."""
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="verl-shims-") as tmp:
        bin_dir = Path(tmp)
        _write_shims(bin_dir)
        record = bin_dir / "launches.jsonl"
        shell_env = {
            "HOME": str(home),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LANG": "C.UTF-8",
            RECORD_VAR: str(record),
            **(env or {}),
        }
        proc = subprocess.run(
            ["bash", str(script)],
            cwd=home,
            env=shell_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        launches = record.read_text().splitlines() if record.exists() else []
    if not launches:
        raise HarnessError(
            f"{script.name} never ran `python3 -m verl.trainer.main_ppo` (bash exit {proc.returncode}); "
            f"its stderr ends: {proc.stderr[-2000:]}"
        )
    if len(launches) > 1:
        logger.info("%s launched the trainer %d times; using the last", script.name, len(launches))
    return list(json.loads(launches[-1]))


def place_verl_files(entry: Mapping[str, Any], home: Path) -> list[Path]:
    """The verl files ``entry``'s script reads from the checkout it runs in (its working directory: ``home``),
    put there as a verl user has them."""
    placed = []
    for name in entry.get("verl_files", []):
        target = home / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(VERL_FILES / name, target)
        placed.append(target)
    return placed


def split_override(arg: str) -> tuple[str, str, str] | None:
    """``(prefix, key, value)`` of a ``key=value``, ``+key=value`` or ``++key=value`` override; None for
    anything else (an option such as ``--config-name=...``, or a ``~key`` deletion)."""
    if arg.startswith("-") or arg.startswith("~") or "=" not in arg:
        return None
    head, value = arg.split("=", 1)
    key = head.lstrip("+")
    prefix = head[: len(head) - len(key)]
    if prefix not in ("", "+", "++") or not key:
        return None
    return prefix, key, value


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _replacement(key: str, old: str, rule: Any, values: Mapping[str, str]) -> str:
    if isinstance(rule, dict):  # {at_most: N}: the script's value, capped
        if set(rule) != {"at_most"}:
            raise HarnessError(f"{key}: a table rule is a value or {{at_most: N}}, not {rule!r}")
        try:
            return str(min(int(old), int(rule["at_most"])))
        except ValueError as exc:
            raise HarnessError(f"{key}={old!r}: at_most needs an integer value") from exc
    try:
        return _scalar(rule).format_map(values) if isinstance(rule, str) else _scalar(rule)
    except KeyError as exc:
        raise HarnessError(f"{key}: the table names placeholder {exc} that the test does not fill") from exc


def substitute(argv: list[str], table: Mapping[str, Any], values: Mapping[str, str]) -> list[str]:
    """``argv`` with the value of every key in ``table['replace']`` replaced (``key=``, ``+key=`` and
    ``++key=`` alike; placeholders filled from ``values``), everything else verbatim; then each
    ``table['append']`` line whose key the command line does not set yet."""
    rules = table.get("replace", {})
    out: list[str] = []
    keys: set[str] = set()
    for arg in argv:
        parsed = split_override(arg)
        if parsed is None:
            out.append(arg)
            continue
        prefix, key, value = parsed
        keys.add(key)
        out.append(f"{prefix}{key}={_replacement(key, value, rules[key], values)}" if key in rules else arg)
    for line in table.get("append", []):
        filled = str(line).format_map(values)
        parsed = split_override(filled)
        if parsed is None:
            raise HarnessError(f"append line {line!r} is not key=value")
        if parsed[1] not in keys:
            out.append(filled)
    return out
