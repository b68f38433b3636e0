"""Rows that share a prompt run it through the model once (verl's ``use_prefix_grouper``).

GRPO and RLOO sample ``rollout.n`` responses per prompt, so a micro-batch of B rows of P prompt and R
response tokens usually holds only B/n distinct prompts, yet a plain forward runs all B x (P + R) tokens.
Here the distinct prompts run once, filling a key/value cache (transformers' ``DynamicCache``); its rows
are then repeated to the B rows (an index, so in backward each row's gradient flows back into its
prompt's one forward), and the B responses run on top of it. That is B/n x P + B x (R - 1) tokens: with
W1's 17-token prompts, 16 responses and n = 4, 1232 instead of 2112 (bench/w1.py); with 4k prompts, 4k
responses and n = 8, 56% of the tokens. The result equals the plain forward's up to float rounding: the
same keys, values and masks reach every attention.

verl's PrefixGrouper (a separate package) patches the attention functions to split one forward into
prefix and suffix attention. transformers' cache does the same through the model's public forward, with
no patch and no extra dependency, so it works for any model that takes ``past_key_values``, including the
critic's backbone. The cost: two calls of the model per micro-batch, so FSDP gathers each layer's
parameters twice in forward and in backward (TUNING.md, "Shared prompts").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

#: ``run(inputs, labels)``: the model's output on ``inputs`` at the positions that predict ``labels``
#: (rows, positions, ...): logits, values, or fused token scores; with ``labels`` None, its raw output
#: (logits or values) at the last position.
ModelCall = Callable[[dict[str, Any], torch.Tensor | None], torch.Tensor]


#: Fewer prompt tokens saved than this and a micro-batch runs every row's prompt: the second model call
#: then costs more than the tokens save. The default run's micro-batches (4 rows, one 16-token prompt,
#: 48 tokens saved) ran 18% slower shared; W1's (32 rows, 8 prompts of 17 tokens, 408 saved) 23% faster;
#: at 7B a 512-token prompt saves 1536 tokens in a 4-row micro-batch, ~100 ms of an H100 per call.
MIN_SAVED_TOKENS = 256


@dataclass(frozen=True)
class PromptGroups:
    """The distinct prompts of a micro-batch: ``first[u]`` is the first row with prompt u, ``inverse[i]``
    the prompt of row i."""

    first: torch.Tensor  # (U,)
    inverse: torch.Tensor  # (B,)


def prompt_groups(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    prompt_len: int,
    min_saved_tokens: int | None = None,
) -> PromptGroups | None:
    """Which rows share their (left-padded) prompt, wherever they sit in the micro-batch; None when sharing
    would save fewer than ``min_saved_tokens`` prompt tokens (default ``MIN_SAVED_TOKENS``; none when no
    two rows share a prompt)."""
    mask = attention_mask[:, :prompt_len]
    key = torch.cat([input_ids[:, :prompt_len] * mask, mask, position_ids[:, :prompt_len] * mask], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    rows = key.shape[0]
    distinct = int(inverse.max()) + 1 if rows else 0
    least = MIN_SAVED_TOKENS if min_saved_tokens is None else min_saved_tokens
    if distinct == rows or (rows - distinct) * prompt_len < least:
        return None
    index = torch.arange(rows, device=inverse.device)
    first = torch.full((distinct,), rows, dtype=index.dtype, device=inverse.device)
    first = first.scatter_reduce(0, inverse, index, reduce="amin")
    return PromptGroups(first, inverse)


def shared_prompt_output(
    run: ModelCall, tensors: dict[str, torch.Tensor], groups: PromptGroups, cache_keyword: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The output at the R positions that predict the R response tokens: at the last prompt position
    (B, 1, ...; raw, since rows of one prompt predict different first tokens) and at response tokens 0 ..
    R-2 (B, R-1, ...; None when R is 1). One forward of the distinct prompts, one of the responses on
    their repeated cache (passed as ``cache_keyword``: ``models.loader.cache_keyword``)."""
    ids, mask, pos = tensors["input_ids"], tensors["attention_mask"], tensors["position_ids"]
    responses = tensors["responses"]
    prompt_len = ids.shape[1] - responses.shape[1]
    cache = DynamicCache()
    first = groups.first
    prompt = {
        "input_ids": ids[first, :prompt_len],
        "attention_mask": mask[first, :prompt_len],
        "position_ids": pos[first, :prompt_len],
        cache_keyword: cache,
    }
    head = run(prompt, None)[groups.inverse]
    if responses.shape[1] == 1:
        return head, None
    cache.batch_select_indices(groups.inverse)  # each row's prompt keys and values: an index (differentiable)
    rest = {
        "input_ids": ids[:, prompt_len:-1],
        "attention_mask": mask[:, :-1],
        "position_ids": pos[:, prompt_len:-1],
        cache_keyword: cache,
    }
    return head, run(rest, responses[:, 1:])
