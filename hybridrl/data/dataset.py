"""Prompt datasets and the sampler that turns them into one batch per step."""

from __future__ import annotations

import logging
import random
from typing import Any

import torch

from hybridrl.config.schema import DataConfig
from hybridrl.data.parquet import load_parquet_examples
from hybridrl.data.tasks import Example, make_task
from hybridrl.protocol import Batch
from hybridrl.seeds import epoch_shuffle_seed, held_out_seed

logger = logging.getLogger(__name__)


class PromptDataset:
    """Prompts with their ground truths, tokenized on demand (left-padded to the batch's longest)."""

    def __init__(self, examples: list[Example], tokenizer: Any, max_prompt_length: int) -> None:
        if not examples:
            raise ValueError("The prompt dataset is empty.")
        self.examples = examples
        self.tokenizer = tokenizer
        self.max_prompt_length = max_prompt_length

    def __len__(self) -> int:
        return len(self.examples)

    def collate(self, indices: list[int]) -> Batch:
        rows = [self.examples[i] for i in indices]
        enc = self.tokenizer([r.prompt for r in rows], padding="longest", return_tensors="pt", add_special_tokens=False)
        if enc["input_ids"].shape[1] > self.max_prompt_length:
            longest = max(range(len(rows)), key=lambda i: int(enc["attention_mask"][i].sum()))
            raise ValueError(
                f"Prompt {indices[longest]} has {int(enc['attention_mask'][longest].sum())} tokens, more than "
                f"data.max_prompt_length={self.max_prompt_length}: raise data.max_prompt_length."
            )
        attention_mask = enc["attention_mask"]
        return Batch.from_dict(
            tensors={
                "input_ids": enc["input_ids"],
                "attention_mask": attention_mask,
                "position_ids": (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0),
            },
            non_tensors={
                "data_source": [r.data_source for r in rows],
                "ability": [r.ability for r in rows],
                "ground_truth": [r.ground_truth for r in rows],
                "prompt_text": [r.prompt for r in rows],
                "extra_info": [r.extra_info for r in rows],
                "agent_name": [r.agent_name for r in rows],
                "raw_prompt": [r.messages or [{"role": "user", "content": r.prompt}] for r in rows],
                "index": list(indices),
            },
        )


class EpochSampler:
    """Walks the dataset in (optionally shuffled) epochs, a fixed number of prompts per step.

    Its position is plain state (epoch, offset), so a resumed run continues with the same prompts.
    """

    def __init__(self, size: int, batch_size: int, shuffle: bool, seed: int) -> None:
        if batch_size > size:
            raise ValueError(f"data.train_batch_size ({batch_size}) is larger than the dataset ({size} prompts).")
        self.size, self.batch_size, self.shuffle, self.seed = size, batch_size, shuffle, seed
        self.epoch, self.offset = 0, 0
        self._order = self._make_order()

    def _make_order(self) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(epoch_shuffle_seed(self.seed, self.epoch)).shuffle(order)
        return order

    def next_indices(self) -> list[int]:
        if self.offset + self.batch_size > self.size:  # drop the incomplete tail of an epoch
            self.epoch, self.offset = self.epoch + 1, 0
            self._order = self._make_order()
        indices = self._order[self.offset : self.offset + self.batch_size]
        self.offset += self.batch_size
        return indices

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
        self._order = self._make_order()


def build_datasets(
    data: DataConfig, tokenizer: Any, tools: list[dict[str, Any]] | None = None
) -> tuple[PromptDataset, PromptDataset | None]:
    """Training and validation prompts: verl-format parquet files (templated with ``tools``' schemas for
    multi-turn rollouts), or the built-in task.

    The built-in task's validation prompts are generated from a different seed (held out).
    """
    if data.train_files is None:
        task = make_task(data.task, **data.task_kwargs)
        train = PromptDataset(task.examples(data.train_size, data.seed), tokenizer, data.max_prompt_length)
        val = (
            PromptDataset(task.examples(data.val_size, held_out_seed(data.seed)), tokenizer, data.max_prompt_length)
            if data.val_size > 0
            else None
        )
        return train, val

    def load(files: list[str], what: str, key: str) -> PromptDataset:
        examples, stats = load_parquet_examples(
            files,
            tokenizer,
            prompt_key=data.prompt_key,
            max_prompt_length=data.max_prompt_length,
            filter_overlong_prompts=data.filter_overlong_prompts,
            truncation=str(data.truncation),
            tools=tools,
        )
        logger.info(
            "%s data: %d rows, %d overlong filtered, %d truncated",
            what,
            stats["rows"],
            stats["filtered_overlong"],
            stats["truncated"],
        )
        if not examples:
            why = f" ({stats['filtered_overlong']} overlong prompts filtered)" if stats["filtered_overlong"] else ""
            raise ValueError(f"data.{key}={files} holds no prompts{why}: give parquet files with rows.")
        return PromptDataset(examples, tokenizer, data.max_prompt_length)

    train = load(data.train_file_list(), "Training", "train_files")
    val = load(data.val_file_list(), "Validation", "val_files") if data.val_files is not None else None
    return train, val
