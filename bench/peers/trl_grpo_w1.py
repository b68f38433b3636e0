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

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from w1_peer import COMMON_ARGS, StepTimes, prompt_rows, run


def copy_reward(completions: list[str], ground_truth: list[str], **_: object) -> list[float]:
    """The built-in copy task's score: the fraction of ground-truth positions the response gets right."""
    scores = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        answer = completion.strip()
        scores.append(sum(1 for i, ch in enumerate(truth) if i < len(answer) and answer[i] == ch) / len(truth))
    return scores


def train(args: argparse.Namespace, timer: StepTimes) -> None:
    config = GRPOConfig(
        output_dir=args.out + ".trainer",
        per_device_train_batch_size=64,  # completions: 16 prompts x 4
        num_generations=4,
        max_completion_length=16,
        max_steps=args.steps,
        num_iterations=1,
        **COMMON_ARGS,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
        reward_funcs=copy_reward,
        args=config,
        train_dataset=Dataset.from_list(prompt_rows(args.prompts)),
        processing_class=AutoTokenizer.from_pretrained(args.model),
        callbacks=[timer],
    )
    trainer.train()


if __name__ == "__main__":
    run(train)
