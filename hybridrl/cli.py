"""The ``hybridrl`` command: ``train``, ``plan``, ``config show``, ``report`` and ``export``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hybridrl.config.loader import ConfigError, to_yaml
from hybridrl.config.schema import TrainerConfig
from hybridrl.observability.tracking.report import write_report
from hybridrl.planning.plan import make_plan
from hybridrl.planning.report import render
from hybridrl.preflight.checks import load_and_check


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hybridrl", description="RL post-training of language models on Ray.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="run PPO (same as python -m hybridrl.trainer.main_ppo)")
    train.add_argument("--config", "-c", default=None, help="a YAML file merged over the defaults")
    train.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    plan = sub.add_parser("plan", help="will the run fit: memory per rank in each phase, before anything starts")
    plan.add_argument("--config", "-c", default=None, help="a YAML file merged over the defaults")
    plan.add_argument(
        "--gpu-memory-gb",
        type=float,
        default=None,
        help="memory of each GPU (80 for an H100); without it, the CPU workers share this host's memory",
    )
    plan.add_argument("overrides", nargs="*", help="the run's dotted overrides, as given to train")
    config = sub.add_parser("config", help="inspect the configuration")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser("show", help="print the resolved config")
    show.add_argument("--config", "-c", default=None, help="a YAML file merged over the defaults")
    show.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.total_steps=20")
    export = sub.add_parser("export", help="write a checkpoint's actor as a Hugging Face model directory")
    export.add_argument("checkpoint_dir", help="<trainer.default_local_dir>/global_step_<k>")
    export.add_argument("out_dir")
    export.add_argument(
        "--adapter",
        action="store_true",
        help="LoRA runs: write the adapters as a PEFT adapter directory instead of the merged model",
    )
    export.add_argument(
        "--max-shard-mb",
        type=int,
        default=TrainerConfig.hf_max_shard_mb,
        help="largest weights file (MiB); the export holds about three of them, not the model "
        f"(default {TrainerConfig.hf_max_shard_mb}, as trainer.hf_max_shard_mb)",
    )
    report = sub.add_parser("report", help="write a self-contained HTML report of a finished (or running) run")
    report.add_argument("run_dir", help="the run's output directory (trainer.output_dir)")
    report.add_argument("--out", default=None, help="where to write the HTML (default: RUN_DIR/report.html)")
    args = parser.parse_args(argv)

    if args.command == "train":
        from hybridrl.trainer.main_ppo import main as train_main  # noqa: PLC0415 - Ray, torch, transformers: only for `train`

        return train_main((["--config", args.config] if args.config else []) + args.overrides)
    if args.command == "plan":
        return _plan(args.overrides, args.config, args.gpu_memory_gb)
    if args.command == "report":
        return _report(args.run_dir, args.out)
    if args.command == "export":
        return _export(args.checkpoint_dir, args.out_dir, args.adapter, args.max_shard_mb)
    try:
        cfg = load_and_check(args.overrides, yaml_path=args.config)
    except ConfigError as exc:
        sys.stderr.write(f"Config error: {exc}\n")
        return 2
    sys.stdout.write(to_yaml(cfg))
    return 0


def _plan(overrides: list[str], yaml_path: str | None, gpu_memory_gb: float | None) -> int:
    """``hybridrl plan``: exit 0 when the run fits, 1 when it does not, 2 on a config error."""
    try:
        plan, fixes = make_plan(overrides, yaml_path, gpu_memory_gb)
    except (ConfigError, ValueError) as exc:
        sys.stderr.write(f"Plan error: {exc}\n")
        return 2
    sys.stdout.write(render(plan, fixes))
    return 0 if plan.fits else 1


def _report(run_dir: str, out: str | None) -> int:
    """``hybridrl report``: exit 2 with one clear line when there is no run to report on."""
    path = Path(run_dir)
    if not path.is_dir():
        sys.stderr.write(f"Report error: run directory not found: {path}\n")
        return 2
    try:
        written = write_report(path, Path(out) if out else None)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"Report error: {exc}\n")
        return 2
    sys.stdout.write(f"{written}\n")
    return 0


def _export(checkpoint_dir: str, out_dir: str, adapter: bool, max_shard_mb: int) -> int:
    from hybridrl.checkpoint.export import export_actor  # noqa: PLC0415 - torch and transformers: only for `export`

    try:
        if max_shard_mb <= 0:
            raise ValueError(f"--max-shard-mb={max_shard_mb} must be positive")
        written = export_actor(checkpoint_dir, out_dir, adapter, max_shard_mb * 2**20)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"Export error: {exc}\n")
        return 2
    sys.stdout.write(f"{written}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
