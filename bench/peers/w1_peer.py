"""What both TRL scripts of W1 share: the command line, the step timer and the result file. Imported by
its module name: Python puts a script's own directory first on the import path."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import trl
from transformers import TrainerCallback

# TRL's trainer settings both scripts share: W1's learning rate, fp32 on the CPU, one process, no
# gradient checkpointing (hybridrl does not checkpoint either), no checkpoints or reports.
COMMON_ARGS = dict(
    learning_rate=1e-5,
    gradient_checkpointing=False,
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
    logging_steps=1,
    seed=0,
)


class StepTimes(TrainerCallback):
    """Wall time at every optimizer step."""

    def __init__(self) -> None:
        self.marks = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())


def run(train: Callable[[argparse.Namespace, StepTimes], None]) -> None:
    """Parse ``--model --prompts --out --steps``, run ``train(args, timer)``, write each step's time."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, help="the W1 model and tokenizer bench/w1.py wrote")
    parser.add_argument("--prompts", required=True, help='a JSON list of {"prompt", "ground_truth"} rows')
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    timer = StepTimes()
    train(args, timer)
    steps = [b - a for a, b in zip(timer.marks, timer.marks[1:])]
    Path(args.out).write_text(json.dumps({"step_s": steps, "trl": trl.__version__, "threads": torch.get_num_threads()}))


def prompt_rows(path: str) -> list[dict[str, str]]:
    return json.loads(Path(path).read_text())
