"""The one error type of configuration problems: its own module, so every config module can raise it."""


class ConfigError(ValueError):
    """A configuration mistake, with a message that names the key and the fix."""
