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

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
from trl.experimental.ppo import PPOConfig, PPOTrainer  # TRL_EXPERIMENTAL_SILENCE=1 quiets its warning
from w1_peer import COMMON_ARGS, StepTimes, prompt_rows, run


def train(args: argparse.Namespace, timer: StepTimes) -> None:
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    dataset = Dataset.from_list(
        [
            {"input_ids": tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]}
            for r in prompt_rows(args.prompts)
        ]
    )

    def causal_lm():
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    def scorer():
        return AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1, dtype=torch.float32)

    config = PPOConfig(
        output_dir=args.out + ".trainer",
        per_device_train_batch_size=64,
        num_mini_batches=1,
        num_ppo_epochs=1,
        response_length=16,
        total_episodes=64 * args.steps,
        temperature=1.0,
        stop_token="eos",
        num_sample_generations=0,
        **COMMON_ARGS,
    )
    trainer = PPOTrainer(
        args=config,
        processing_class=tokenizer,
        model=causal_lm(),
        ref_model=causal_lm(),
        reward_model=scorer(),
        value_model=scorer(),
        train_dataset=dataset,
        callbacks=[timer],
    )
    trainer.train()


if __name__ == "__main__":
    run(train)
