"""W1 on TRL 1.12's PPOTrainer (the last TRL with PPO, under ``trl.experimental``), for bench/w1.py's
side-by-side (run in a virtualenv with trl 1.12, never hybridrl's).

    /path/to/trl-venv/bin/python bench/peers/trl_ppo_w1.py --model DIR --prompts FILE --out FILE [--steps 12]

TRL's PPO scores with a reward *model* (no rule functions), so the reward and value models are sequence
classifiers on the W1 model (their heads start random): the timing covers the same passes as
hybridrl's PPO (generation, policy, reference, value and reward forwards, policy and value updates),
not the same learning. W1's shapes: 64 sequences per step (TRL samples each prompt once, so 64 prompts
stand in for 16 x 4), 16 response tokens, one PPO epoch, one mini-batch, lr 1e-5, temperature 1, no
gradient checkpointing, fp32, one process on all cores. Writes each step's wall time to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
from trl.experimental.ppo import PPOConfig, PPOTrainer  # TRL_EXPERIMENTAL_SILENCE=1 quiets its warning


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
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    rows = json.loads(Path(args.prompts).read_text())
    dataset = Dataset.from_list(
        [{"input_ids": tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]} for r in rows]
    )
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    reward = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1, dtype=torch.float32)
    value = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1, dtype=torch.float32)
    config = PPOConfig(
        output_dir=args.out + ".trainer",
        per_device_train_batch_size=64,
        num_mini_batches=1,
        num_ppo_epochs=1,
        response_length=16,
        total_episodes=64 * args.steps,
        learning_rate=1e-5,
        temperature=1.0,
        stop_token="eos",
        num_sample_generations=0,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
    )
    timer = StepTimes()
    trainer = PPOTrainer(
        args=config,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref,
        reward_model=reward,
        value_model=value,
        train_dataset=dataset,
        callbacks=[timer],
    )
    trainer.train()
    steps = [b - a for a, b in zip(timer.marks, timer.marks[1:])]
    Path(args.out).write_text(json.dumps({"step_s": steps, "trl": trl.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
