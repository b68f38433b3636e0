"""verl-format parquet datasets: rows of chat prompts with a ground truth, read with pyarrow.

One row per prompt, the columns verl's preprocess scripts write:

=============== ========================================================== ==========
column          type                                                       required
=============== ========================================================== ==========
data_source     str: picks the reward function (hybridrl.rewards registry) yes
prompt          list of {"role": str, "content": str} chat messages        yes
ability         str                                                        no
reward_model    struct {"ground_truth": ..., "style": str (optional)}      yes
extra_info      struct / dict, passed to the reward function (multi-turn:  no
                ``tools_kwargs`` = {tool: {"create_kwargs": {...}}})
agent_name      str: the row's agent loop, single_turn_agent | tool_agent  no
=============== ========================================================== ==========

The prompt column can be renamed with ``prompt_key``. The messages are turned into text with the
tokenizer's chat template at load time (``add_generation_prompt=True``), so ``Example.prompt`` is the
exact text the model sees.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from hybridrl.config.choices import AgentLoopName
from hybridrl.data.tasks import Example

logger = logging.getLogger(__name__)

TRUNCATION_MODES = ("error", "left", "right")


def _fail(path: str, row: int, column: str, problem: str) -> ValueError:
    return ValueError(f"{path}: row {row}, column '{column}': {problem}")


def _read_rows(path: str, prompt_key: str) -> list[dict[str, Any]]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"Parquet file {path!r} does not exist.")
    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise ValueError(f"{path}: cannot be read as parquet: {type(exc).__name__}: {exc}") from exc
    for column in ("data_source", prompt_key, "reward_model"):
        if column not in table.column_names:
            raise _fail(
                path,
                0,
                column,
                f"missing column (every row needs it; the file has "
                f"{table.column_names}). Is this a verl-format parquet file?",
            )
    return table.to_pylist()


def _as_dict(value: Any) -> Any:
    """A pyarrow map column reads as a list of (key, value) pairs: make it a dict."""
    if isinstance(value, list) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        return dict(value)
    return value


def _example_fields(path: str, i: int, row: dict[str, Any], prompt_key: str) -> dict[str, Any]:
    source = row.get("data_source")
    if not isinstance(source, str) or not source:
        raise _fail(path, i, "data_source", f"must be a non-empty string, got {source!r}")
    messages = row.get(prompt_key)
    if isinstance(messages, str):
        raise _fail(
            path,
            i,
            prompt_key,
            "is a plain string; it must be a list of chat messages "
            "[{'role': 'user', 'content': ...}] as verl writes them",
        )
    if not isinstance(messages, list) or not messages:
        raise _fail(path, i, prompt_key, f"must be a non-empty list of chat messages, got {messages!r}")
    for j, msg in enumerate(messages):
        msg = _as_dict(msg)
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or not isinstance(msg.get("content"), str):
            raise _fail(
                path, i, prompt_key, f"message {j} must be a dict with string 'role' and 'content', got {msg!r}"
            )
    ability = row.get("ability")
    if ability is not None and not isinstance(ability, str):
        raise _fail(path, i, "ability", f"must be a string, got {ability!r}")
    reward_model = _as_dict(row.get("reward_model"))
    if not isinstance(reward_model, dict):
        raise _fail(path, i, "reward_model", f"must be a struct with 'ground_truth', got {reward_model!r}")
    if reward_model.get("ground_truth") is None:
        raise _fail(path, i, "reward_model", f"has no 'ground_truth' (got {reward_model!r})")
    extra_info = _as_dict(row.get("extra_info"))
    if extra_info is not None and not isinstance(extra_info, dict):
        raise _fail(path, i, "extra_info", f"must be a struct/dict or null, got {extra_info!r}")
    agent_name = row.get("agent_name")
    if agent_name is not None and agent_name not in AgentLoopName.values():
        raise _fail(path, i, "agent_name", f"is {agent_name!r}; the agent loops are {list(AgentLoopName.values())}")
    return dict(
        messages=[_as_dict(m) for m in messages],
        data_source=source,
        ability=ability,
        ground_truth=reward_model["ground_truth"],
        extra_info=extra_info,
        agent_name=agent_name,
    )


def _truncate(tokenizer: Any, ids: list[int], max_len: int, side: str) -> str | None:
    """Keep ``max_len`` tokens from one side and decode them back to text.

    Caveat: decode then encode is not always the identity. A cut can split a multi-token word or a
    multi-byte character (byte-level BPE decodes the half into a replacement character), merges can
    differ at the new boundary, and unknown tokens decode to their literal text (``<unk>``), which
    re-encodes to several tokens. So the text is re-encoded and cut further until it fits; it can
    differ slightly from the original at the cut. Right-truncation also drops the chat template's
    generation prompt (the assistant header) at the end, which is why "left" is usually the choice.
    """
    keep = max_len
    while keep > 0:
        kept = ids[-keep:] if side == "left" else ids[:keep]
        text = tokenizer.decode(kept, skip_special_tokens=False)
        length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if length <= max_len:
            return text
        keep -= max(1, length - max_len)
    return None


def load_parquet_examples(
    files: str | Sequence[str],
    tokenizer: Any,
    *,
    prompt_key: str = "prompt",
    max_prompt_length: int,
    filter_overlong_prompts: bool = True,
    truncation: str = "error",
    tools: list[dict[str, Any]] | None = None,
) -> tuple[list[Example], dict[str, int]]:
    """Read verl-format parquet files (concatenated in order) into chat-templated Examples; ``tools`` (OpenAI
    function schemas) are shown to the model by the chat template, as verl's tool agent loop does.

    Prompts longer than ``max_prompt_length`` tokens are dropped when ``filter_overlong_prompts``,
    else handled by ``truncation``: "error" raises, "left"/"right" keep that many tokens from the end /
    start. Returns the examples and ``{"rows", "filtered_overlong", "truncated"}`` counts.
    """
    if truncation not in TRUNCATION_MODES:
        raise ValueError(f"truncation={truncation!r}; use one of {TRUNCATION_MODES}.")
    if max_prompt_length < 1:
        raise ValueError(f"max_prompt_length={max_prompt_length} must be at least 1.")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"The tokenizer ({type(tokenizer).__name__}, {getattr(tokenizer, 'name_or_path', '')!r}) has no "
            "chat template, but verl-format parquet prompts are chat messages. Use the tokenizer of a "
            "chat/instruct model (e.g. Qwen/Qwen2.5-0.5B-Instruct), or set tokenizer.chat_template."
        )
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise ValueError("No parquet files given.")
    examples: list[Example] = []
    stats = {"rows": 0, "filtered_overlong": 0, "truncated": 0}
    for path in map(str, paths):
        rows = _read_rows(path, prompt_key)
        fields = [_example_fields(path, i, row, prompt_key) for i, row in enumerate(rows)]
        texts = []
        for i, f in enumerate(fields):
            try:
                texts.append(
                    tokenizer.apply_chat_template(
                        f["messages"], tools=tools or None, add_generation_prompt=True, tokenize=False
                    )
                )
            except Exception as exc:
                raise _fail(
                    path, i, prompt_key, f"the chat template failed on these messages: {type(exc).__name__}: {exc}"
                ) from exc
        ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        stats["rows"] += len(rows)
        for i, (f, text, tokens) in enumerate(zip(fields, texts, ids)):
            if len(tokens) > max_prompt_length:
                if filter_overlong_prompts:
                    stats["filtered_overlong"] += 1
                    continue
                if truncation == "error":
                    raise _fail(
                        path,
                        i,
                        prompt_key,
                        (
                            f"the templated prompt has {len(tokens)} tokens, more than max_prompt_length="
                            f"{max_prompt_length}: raise data.max_prompt_length, set "
                            f"data.filter_overlong_prompts=true, or data.truncation=left/right"
                        ),
                    )
                text = _truncate(tokenizer, list(tokens), max_prompt_length, truncation)
                if text is None:
                    raise _fail(
                        path,
                        i,
                        prompt_key,
                        f"cannot be {truncation}-truncated to {max_prompt_length} tokens that re-encode as many",
                    )
                stats["truncated"] += 1
            examples.append(
                Example(
                    prompt=text,
                    ground_truth=f["ground_truth"],
                    data_source=f["data_source"],
                    extra_info=f["extra_info"],
                    ability=f["ability"],
                    agent_name=f["agent_name"],
                    messages=f["messages"],
                )
            )
    logger.info(
        "Loaded %d prompts from %d parquet file(s): %d rows, %d overlong filtered, %d truncated",
        len(examples),
        len(paths),
        stats["rows"],
        stats["filtered_overlong"],
        stats["truncated"],
    )
    if stats["rows"] and not examples:
        raise ValueError(
            f"All {stats['rows']} prompts in {paths} are longer than max_prompt_length={max_prompt_length} "
            "tokens and were filtered out: raise data.max_prompt_length."
        )
    return examples, stats
