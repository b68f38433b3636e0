"""The one error type of configuration problems: its own module, so every config module can raise it."""

from typing import NoReturn


class ConfigError(ValueError):
    """A configuration mistake, with a message that names the key and the fix."""


def fail(msg: str) -> NoReturn:
    raise ConfigError(msg)
