"""The prompts: parquet files or the built-in task, their lengths and batching."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hybridrl.config.choices import Truncation
from hybridrl.config.schema.fields import doc, positive, values_of


@dataclass(frozen=True)
class DataConfig:
    train_files: Any = doc(None, "verl-format parquet file(s) (one path or a list); null = the built-in task")
    val_files: Any = doc(None, "parquet file(s) for validation; null = held-out prompts of the built-in task")
    prompt_key: str = doc("prompt", "parquet column with the chat messages")
    reward_fn_key: str = doc(
        "data_source", "the column that picks the reward function and is passed as data_source: data_source | ability"
    )
    filter_overlong_prompts: bool = doc(True, "drop prompts longer than max_prompt_length (the count is logged)")
    truncation: Truncation = doc(Truncation.error, "for overlong prompts that are not filtered: error | left | right")
    task: str = doc("copy", "built-in task that makes prompts and scores answers (see hybridrl/data/tasks.py)")
    task_kwargs: dict[str, Any] = doc(
        {"num_digits": 3}, "passed to the task's constructor (copy: num_digits, the digits to repeat)"
    )
    train_size: int = doc(4096, "prompts generated for the training set")
    val_size: int = doc(64, "held-out prompts generated for validation (built-in task)")
    train_batch_size: int = doc(32, "prompts per step (each sampled rollout.n times)")
    gen_batch_size: int | None = doc(
        None,
        "DAPO's (verl's key): prompts sampled per generation round with algorithm.filter_groups.enable; "
        "null = train_batch_size",
    )
    max_prompt_length: int = doc(16, "longest prompt allowed (tokens); each batch is left-padded to its longest prompt")
    max_response_length: int = doc(6, "new tokens generated per response")
    shuffle: bool = doc(True, "reshuffle the training prompts every epoch")
    seed: int = doc(1, "seed of prompt generation and shuffling")

    def train_file_list(self) -> list[str]:
        return file_list(self.train_files)

    def val_file_list(self) -> list[str]:
        return file_list(self.val_files)

    def problems(self, at: str) -> list[str]:
        problems = positive(at, **values_of(self, "train_batch_size train_size max_prompt_length max_response_length"))
        if self.reward_fn_key not in ("data_source", "ability"):
            problems.append(
                f"{at}.reward_fn_key={self.reward_fn_key!r}: the reward function is picked by data_source or ability "
                f"(the columns hybridrl keeps from the data); other columns are not supported yet."
            )
        return problems


def file_list(value: object) -> list[str]:
    """``data.train_files`` / ``val_files``: one path or a list of paths."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]  # type: ignore[attr-defined]
