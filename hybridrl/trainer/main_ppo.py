"""Entry point: ``python -m hybridrl.trainer.main_ppo [--config FILE.yaml] [key=value ...]``.

With no arguments it runs the embedded default: the tiny model learns the built-in copy task with PPO
on a local Ray cluster, on CPU, in a few minutes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hybridrl.checkpoint.manager import CheckpointError
from hybridrl.cluster.errors import (
    ClusterConnectError,
    PoolPlacementError,
    WorkerCallError,
    WorkerCallTimeout,
    WorkerStuckError,
)
from hybridrl.config.loader import ConfigError
from hybridrl.logging_utils import setup_logging
from hybridrl.preflight.checks import load_and_check
from hybridrl.rewards.registry import RewardError
from hybridrl.trainer.run_lock import RunLockError

logger = logging.getLogger("hybridrl")

SHIPPED_CONFIGS = Path(__file__).resolve().parents[1] / "config"  # ppo_trainer.yaml, ppo_megatron_trainer.yaml

USAGE = """usage: python -m hybridrl.trainer.main_ppo [--config FILE.yaml | --config-path DIR --config-name NAME] [key=value ...]

Trains with PPO (or GRPO and friends, by algorithm.adv_estimator). With no arguments it runs the embedded
default: a tiny model learns a copy task on a local Ray cluster. Overrides use dotted keys, as verl's:
    trainer.total_steps=20 actor_rollout_ref.actor.optim.lr=1e-6 trainer.logger=[console,jsonl]
(+key=value and ~key, Hydra's forms, work too). `hybridrl config show` prints every key with its default;
docs/CONFIG.md says what each means.
"""


def split_options(argv: list[str]) -> tuple[str | None, list[str]]:
    """The config file the leading options name, and the overrides after them: ``--config FILE`` (``-c``,
    ``--config=FILE``), or Hydra's ``--config-path DIR --config-name NAME`` (``DIR/NAME.yaml``) as verl's
    command lines write it."""
    options: dict[str, str] = {}
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        flag, sep, value = rest.pop(0).partition("=")
        name = {"-c": "--config"}.get(flag, flag)
        if name not in ("--config", "--config-path", "--config-name"):
            break
        what = {"--config": "a YAML file path", "--config-path": "a directory", "--config-name": "a file name"}[name]
        if not sep:
            if not rest or "=" in rest[0] or rest[0].startswith("-"):
                raise ConfigError(f"{name} needs {what}, before the key=value overrides.")
            value = rest.pop(0)
        if not value:
            raise ConfigError(f"{name} needs {what}, before the key=value overrides.")
        options[name] = value
    else:
        return _yaml_path(options), rest
    raise ConfigError(f"'{flag}' is not an option here: use --config FILE (or --config-path/--config-name) first.")


def _yaml_path(options: dict[str, str]) -> str | None:
    if "--config" in options:
        if "--config-path" in options or "--config-name" in options:
            raise ConfigError("Give --config FILE, or --config-path DIR with --config-name NAME, not both.")
        return options["--config"]
    if "--config-name" not in options:
        if "--config-path" in options:
            raise ConfigError("--config-path needs --config-name NAME (the YAML file in it, without .yaml).")
        return None
    name = options["--config-name"]
    name = name if name.endswith((".yaml", ".yml")) else name + ".yaml"
    config_dir = options.get("--config-path", ".")
    path = Path(config_dir) / name
    shipped = SHIPPED_CONFIGS / name
    if not path.exists() and not Path(config_dir).is_absolute() and shipped.exists():
        # verl's hydra reads a relative --config-path beside its main module (verl/trainer/config): its
        # scripts' --config-path=config --config-name=ppo_megatron_trainer name verl's shipped files, and
        # hybridrl ships its reading of them.
        logger.info("--config-name=%s: hybridrl's %s (verl's shipped config of that name)", name, shipped)
        return str(shipped)
    return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--help", "-h"):
        sys.stdout.write(USAGE)
        return 0
    try:
        yaml_path, overrides = split_options(argv)
        cfg = load_and_check(overrides, yaml_path=yaml_path)
    except ConfigError as exc:
        logger.error("Config error: %s", exc)
        return 2
    # Ray and the worker code load only once the config is valid: a config error is answered at once.
    from hybridrl.trainer.job import run  # noqa: PLC0415 - Ray and the workers, only for a valid config

    try:
        result = run(cfg)
    except ConfigError as exc:  # what only the loaded data can tell (checked before Ray starts)
        logger.error("Config error: %s", exc)
        return 2
    except KeyboardInterrupt:
        logger.error("Interrupted: workers and the local Ray cluster were shut down.")
        return 130
    except (
        RewardError,
        WorkerCallError,
        WorkerCallTimeout,
        WorkerStuckError,
        PoolPlacementError,
        CheckpointError,
        ClusterConnectError,
        RunLockError,
        OSError,
        ValueError,
    ) as exc:
        # Known failures get one clear line; checkpoints already written stay (resume_mode=auto).
        logger.error("%s: %s", type(exc).__name__, exc)
        return 1
    logger.info("%s", closing_line(result["summary"], result["output_dir"]))
    return 0


def closing_line(s: dict[str, Any], output_dir: str) -> str:
    """What the run did, honestly: first vs last, the peak on the way and whether it ended near it."""
    verdict = "the reward rose" if s["gain"] >= 0.25 else "the reward did not rise by 0.25"
    if s["last_mean"] >= s["peak_mean"] - 0.05:
        ending = "ended near its peak"
    else:
        ending = f"ended {s['peak_mean'] - s['last_mean']:.3f} below its peak"
    return (
        f"Done in {s['wall_s']:.0f} s. Mean critic/score/mean over {s['window']} steps: {s['first_mean']:.3f} "
        f"first, peaked at {s['peak_mean']:.3f} (step {s['peak_step']}), {s['last_mean']:.3f} last "
        f"(gain {s['gain']:+.3f}): {verdict}, and {ending}. Report: hybridrl report {output_dir}"
    )


if __name__ == "__main__":
    sys.exit(main())
