"""W1 on TRL's GRPOTrainer, for bench/w1.py's side-by-side (run in a virtualenv with trl, never hybridrl's).

    /path/to/trl-venv/bin/python bench/peers/trl_grpo_w1.py --model DIR --prompts FILE --out FILE [--steps 12]

``--model``: the W1 model and tokenizer bench/w1.py wrote; ``--prompts``: a JSON list of {"prompt",
"ground_truth"} rows (the copy task's). One process, all cores, fp32, TRL's defaults except: W1's batch
(16 prompts x 4 generations, 16 completion tokens, one step per generation batch), lr 1e-5, no gradient
checkpointing (hybridrl does not checkpoint either), no reference model (beta 0, TRL's default). Writes
each step's wall time (a callback at every optimizer step) to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


def copy_reward(completions: list[str], ground_truth: list[str], **_: object) -> list[float]:
    """The built-in copy task's score: the fraction of ground-truth positions the response gets right."""
    scores = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        answer = completion.strip()
        scores.append(sum(1 for i, ch in enumerate(truth) if i < len(answer) and answer[i] == ch) / len(truth))
    return scores


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.marks = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):
        self.marks.append(time.perf_counter())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = json.loads(Path(args.prompts).read_text())
    dataset = Dataset.from_list(rows)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = GRPOConfig(
        output_dir=args.out + ".trainer",
        per_device_train_batch_size=64,  # completions: 16 prompts x 4
        num_generations=4,
        max_completion_length=16,
        learning_rate=1e-5,
        max_steps=args.steps,
        num_iterations=1,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    timer = StepTimes()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=copy_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[timer],
    )
    trainer.train()
    steps = [b - a for a, b in zip(timer.marks, timer.marks[1:])]
    Path(args.out).write_text(json.dumps({"step_s": steps, "trl": trl.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
