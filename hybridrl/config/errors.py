"""The one error type of configuration problems: its own module, so every config module can raise it."""

from typing import NoReturn


class ConfigError(ValueError):
    """A configuration mistake, with a message that names the key and the fix."""


def fail(msg: str) -> NoReturn:
    raise ConfigError(msg)


def all_at_once(problems: list[str]) -> str:
    """Every problem in one message, so a user fixes them all in one launch: one problem is its own line;
    several are listed under one line that counts them."""
    unique = list(dict.fromkeys(problems))
    if len(unique) == 1:
        return unique[0]
    return f"{len(unique)} config problems (all of them; fix them and launch again):\n" + "\n".join(
        f"  - {problem}" for problem in unique
    )
