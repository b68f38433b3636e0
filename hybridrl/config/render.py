"""Render the schema's defaults and field docs as the documented YAML users read (``ppo_trainer.yaml``).

The YAML is generated, never edited by hand: ``python -m hybridrl.config.render > hybridrl/config/ppo_trainer.yaml``
rewrites it, and tests/config/test_schema.py fails when the shipped file and the schema disagree.
"""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from typing import Any

import yaml

from hybridrl.config.schema import Config

HEADER = """\
# hybridrl defaults: the embedded run (tiny model, built-in task, local Ray cluster, CPU).
# Generated from hybridrl/config/schema/ (python -m hybridrl.config.render): edit the schema, not this
# file. docs/CONFIG.md is the long form. Override any key on the command line with dotted paths:
#   python -m hybridrl.trainer.main_ppo trainer.total_steps=20
"""
COMMENT_COLUMN = 30


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _scalar(value: Any) -> str:
    value = _plain(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text[: -len("...")].strip() if text.endswith("...") else text


def _line(indent: int, key: str, value: str, help: str) -> str:
    text = f"{'  ' * indent}{key}:{' ' + value if value else ''}"
    if help:
        text = text.ljust(COMMENT_COLUMN - 2) + f"  # {help}"
    return text


def _dict_lines(value: dict[str, Any], indent: int) -> list[str]:
    return [_line(indent, key, _scalar(item), "") for key, item in value.items()]


def _section_lines(defaults: Any, indent: int) -> list[str]:
    """``defaults``: a section's default instance (a section may default differently from its class, as the
    critic's optimizer does)."""
    lines = []
    for f in dataclasses.fields(defaults):
        help = f.metadata.get("help", "")
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            lines.append(_line(indent, f.name, "", help))
            lines.extend(_section_lines(value, indent + 1))
        elif isinstance(value, dict) and value:
            lines.append(_line(indent, f.name, "", help))
            lines.extend(_dict_lines(value, indent + 1))
        else:
            lines.append(_line(indent, f.name, _scalar(value), help))
    return lines


def render_defaults() -> str:
    """The documented YAML of every key's default, a blank line between top-level sections."""
    lines = _section_lines(Config(), 0)
    spaced = [("\n" if i and not line.startswith(" ") else "") + line for i, line in enumerate(lines)]
    return HEADER + "\n" + "\n".join(spaced) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_defaults())
