"""How a section declares its fields (``doc``, ``section``) and the range checks several sections share.

A section with range rules answers ``problems(at)``: one message per value out of range, each naming its key
under ``at``, the section's dotted path (a section used at several paths, such as ``OptimConfig``, learns its
path from its parent).
"""

from __future__ import annotations

import copy
import math
from dataclasses import field
from typing import Any, TypeVar

T = TypeVar("T")


def doc(default: T, help: str) -> T:
    """A field with its default and one line of documentation (rendered as the YAML comment)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def section(cls: type[T], help: str = "") -> T:
    """A nested section (its own dataclass), with an optional comment on its header line."""
    return field(default_factory=cls, metadata={"help": help})


def values_of(section: object, names: str) -> dict[str, Any]:
    """The fields ``names`` (space-separated) of ``section`` by name: the range checks' keyword arguments, each
    key spelled once."""
    return {name: getattr(section, name) for name in names.split()}


def positive(at: str, **values: float | None) -> list[str]:
    """``<at>.<key>=<value> must be positive.`` for each value not above 0 (NaN included); None is unset."""
    return [
        f"{at}.{key}={value} must be positive." for key, value in values.items() if value is not None and not value > 0
    ]


def at_least(bound: int, at: str, note: str = "", **values: float) -> list[str]:
    """``<at>.<key>=<value> must be >= <bound><note>.`` for each value below ``bound`` (NaN included)."""
    return [f"{at}.{key}={value} must be >= {bound}{note}." for key, value in values.items() if not value >= bound]


def finite(at: str, **values: float) -> list[str]:
    """``<at>.<key>=<value> must be a finite number.`` for each infinite or NaN value."""
    return [f"{at}.{key}={value} must be a finite number." for key, value in values.items() if not math.isfinite(value)]
