"""The ``hybridrl`` command: ``train`` and ``config show``."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl", description="RL post-training of language models on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run PPO (same as python -m hybridrl.trainer.main_ppo)")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    config = sub.add_parser("config", help="inspect the configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the resolved config")
    show.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    args = parser.parse_args(argv)

    if args.command == "train":
        from hybridrl.trainer.main_ppo import main as train_main

        return train_main(args.overrides)
    from hybridrl.config.loader import ConfigError, load_config, to_yaml

    try:
        cfg = load_config(args.overrides)
    except ConfigError as exc:
        sys.stderr.write(f"Config error: {exc}\n")
        return 2
    sys.stdout.write(to_yaml(cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
