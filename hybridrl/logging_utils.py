"""Logging set-up shared by the driver and the workers."""

from __future__ import annotations

import logging
import os


def quiet_libraries() -> None:
    """Keep library progress bars and info chatter out of the training log."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers  # noqa: PLC0415 - heavy; setup_logging's callers must not pay for it

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass


def setup_logging(level: int = logging.INFO) -> None:
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        root.addHandler(handler)
    logging.getLogger("hybridrl").setLevel(level)
