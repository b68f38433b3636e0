"""The rollout interface every generation engine keeps, and the batch layout every engine returns.

An engine lives in the actor's worker process (verl's "hybrid engine"): the trainer streams it the
weights after each update (``load_weights``, one ``(name, tensor)`` at a time, never a whole state per
rank), wakes it for generation (``resume``) and frees its memory while training (``release``).
``generate`` takes left-padded prompts and returns right-padded responses with the log-probability the
engine sampled each token with (``rollout_log_probs``), which the trainer compares with its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from hybridrl.config.schema import SamplingConfig
from hybridrl.seeds import request_seed


@dataclass(frozen=True)
class EngineSite:
    """What every engine kind is built for: the model, the weights' dtype, this rank's device and place in
    the generating group, the special tokens and the longest sequence."""

    model_path: str
    trust_remote_code: bool
    dtype: torch.dtype
    device: torch.device
    pad_token_id: int
    eos_token_id: int | list[int] | None
    max_model_len: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0


@dataclass(frozen=True)
class EarlyReturn:
    """When a call may return before every response is finished (fully asynchronous training's partial
    rollouts; engines that can stop mid-call honour it, the others finish their ``max_new_tokens``): once
    ``groups_wanted`` groups (rows sharing a ``group_ids`` value) have every row at a stop token, or as soon as
    ``interrupted()`` says a weight sync is waiting. The unfinished rows return the tokens they have."""

    group_ids: tuple[int, ...]
    groups_wanted: int
    interrupted: Callable[[], bool]


@dataclass(frozen=True)
class GenerationRequest:
    """One ``generate`` call, whatever the engine: left-padded prompts (``input_ids``, ``attention_mask``:
    (B, P)), the longest response, how to sample, and the seed that makes the draw repeatable (or a seed per
    row)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    max_new_tokens: int
    sampling: SamplingConfig
    seed: int = 0
    row_seeds: tuple[int, ...] | None = None
    stop_token_ids: tuple[int, ...] = ()
    early_return: EarlyReturn | None = None

    def stops(self, eos_token_id: int | Sequence[int] | None) -> list[int]:
        """The tokens that end a response: the model's end-of-sequence and the request's own stops (the agent
        loop ends a turn at a tool call's end), each kept as the response's last token."""
        eos = eos_ids(eos_token_id)
        return eos + [t for t in self.stop_token_ids if t not in eos]

    def seeds(self) -> list[int]:
        """One sampling seed per row. ``row_seeds`` (the agent loop's) make a row's tokens independent of the
        rows it is generated with: a sample's turn samples the same whichever samples are ready beside it."""
        if self.row_seeds is not None:
            return list(self.row_seeds)
        return [request_seed(self.seed, i) for i in range(self.input_ids.shape[0])]


class RolloutEngine(Protocol):
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...

    def release(self) -> None: ...

    def resume(self, keep_weights: bool = True) -> None: ...

    def generate(self, request: GenerationRequest) -> dict[str, torch.Tensor]:
        """Responses to the request's prompts, right-padded to its ``max_new_tokens``, sampled as it says."""
        ...

    def weights_digest(self) -> str:
        """A digest of the weights the engine generates with (tests compare runs by it)."""
        ...


def sampling_values(sampling: SamplingConfig, top_k_off: int) -> dict[str, Any]:
    """Temperature, top-k and top-p as an inference engine takes them: greedy is temperature 0, and our top_k
    of 0 or -1 (off) is the engine's ``top_k_off``."""
    if not sampling.do_sample:
        return dict(temperature=0.0, top_k=top_k_off, top_p=1.0)
    top_k = sampling.top_k if sampling.top_k > 0 else top_k_off
    return dict(temperature=sampling.temperature, top_k=top_k, top_p=sampling.top_p)


def eos_ids(eos_token_id: int | Sequence[int] | None) -> list[int]:
    if eos_token_id is None:
        return []
    return [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)


def response_mask_from(
    responses: torch.Tensor, eos_token_id: int | Sequence[int] | None, pad_token_id: int
) -> torch.Tensor:
    """1 up to and including the first EOS of each row, 0 after it."""
    # responses: (B, R)
    eos = eos_ids(eos_token_id)
    is_eos = torch.zeros_like(responses, dtype=torch.bool)
    for token in eos:
        is_eos |= responses == token
    # Count EOS tokens strictly before each position; positions after the first EOS see >= 1.
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()
    mask = (eos_before == 0).long()
    if not eos:
        mask &= (responses != pad_token_id).long()
    return mask


def position_ids_from(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: the first real token of each row is position 0."""
    return (torch.cumsum(attention_mask, dim=1) - 1).clamp(min=0)


def prompt_token_lists(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """Each left-padded prompt's real tokens, as an inference engine takes them."""
    return [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask, strict=True)]


def rollout_batch(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: torch.Tensor,
    log_probs: torch.Tensor,
    *,
    eos_token_id: int | Sequence[int] | None,
    pad_token_id: int,
    generated: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The trainer's view of one generation: prompts and responses joined, masks, positions, and the
    rollout's log-probs (0 where the response is padding). ``generated`` (B,): the positions each row's call
    generated, where it returned early (``EarlyReturn``): an unfinished row's response ends there."""
    # input_ids, attention_mask: (B, P); responses, log_probs: (B, R)
    response_mask = response_mask_from(responses, eos_token_id, pad_token_id)
    if generated is not None:
        positions = torch.arange(responses.shape[1], device=responses.device)
        response_mask = response_mask * (positions[None, :] < generated[:, None].to(responses.device)).long()
    responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_token_id))
    return joined_columns(input_ids, attention_mask, responses, response_mask, response_mask, log_probs)


def joined_columns(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    responses: torch.Tensor,
    response_mask: torch.Tensor,
    context_mask: torch.Tensor,
    log_probs: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Prompts and responses joined. ``response_mask`` marks the tokens the policy wrote (the loss's);
    ``context_mask`` every response token the model attends to: the same, except in multi-turn rollouts, whose
    tool and user tokens are context but not the policy's."""
    full_mask = torch.cat([attention_mask, context_mask], dim=1)  # (B, P+R)
    return {
        "prompts": input_ids,
        "responses": responses,
        "input_ids": torch.cat([input_ids, responses], dim=1),
        "attention_mask": full_mask,
        "position_ids": position_ids_from(full_mask),
        "response_mask": response_mask,
        "rollout_log_probs": log_probs.float() * response_mask,
    }


def pad_responses(
    token_lists: Sequence[Sequence[int]], log_prob_lists: Sequence[Sequence[float]], width: int, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad an engine's per-row outputs to ``width`` tokens."""
    responses = torch.full((len(token_lists), width), pad_token_id, dtype=torch.long)
    log_probs = torch.zeros((len(token_lists), width), dtype=torch.float32)
    for i, (tokens, lps) in enumerate(zip(token_lists, log_prob_lists, strict=True)):
        n = min(len(tokens), width)
        responses[i, :n] = torch.tensor(list(tokens[:n]), dtype=torch.long)
        log_probs[i, :n] = torch.tensor(list(lps[:n]), dtype=torch.float32)
    return responses, log_probs
