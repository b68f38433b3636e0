"""What fully asynchronous training keeps of a sample between generation calls, and the step batch made of
finished groups.

A sample grows over one or more generation calls (partial rollouts): each call adds up to a segment of
tokens, every token tagged with the weights version (``param version``: weight syncs so far) that generated
it, and its log-probability under those weights (the behaviour policy's). A GRPO group is trained whole, so
the unit the trainer takes is a group of ``rollout.n`` finished samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from hybridrl.generation.engines.base import joined_columns, position_ids_from
from hybridrl.generation.generation import GEN_KEYS
from hybridrl.protocol import Batch


@dataclass
class Sample:
    """One response being generated for one prompt row."""

    prompt: list[int]  # the prompt's tokens, without padding
    tokens: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finished: bool = False

    def extend(self, tokens: list[int], log_probs: list[float], version: int, stopped: bool, budget: int) -> None:
        """Append a call's tokens (those of the response up to and including a stop), at most ``budget`` in
        all; finished at a stop token or at the budget."""
        room = budget - len(self.tokens)
        taken = tokens[:room]
        self.tokens += taken
        self.log_probs += log_probs[: len(taken)]
        self.versions += [version] * len(taken)
        self.finished = (stopped and len(taken) == len(tokens)) or len(self.tokens) >= budget


@dataclass
class SampleGroup:
    """One prompt's ``rollout.n`` samples: where it was drawn (``draw``, ``position`` in the draw, for the data
    position a checkpoint keeps), its rows' columns other than the generation inputs, and the version it was
    started at (a group started again after a drop starts from scratch)."""

    draw: int
    position: int
    rows: Batch
    samples: list[Sample]
    started_version: int = 0

    @property
    def finished(self) -> bool:
        return all(s.finished for s in self.samples)

    def oldest_version(self) -> int:
        """The oldest weights version any of its tokens came from (its start, before it has tokens)."""
        return min((s.versions[0] for s in self.samples if s.versions), default=self.started_version)

    def restart(self, version: int) -> None:
        """Dropped as too stale: every sample generated again from its prompt."""
        self.samples = [Sample(s.prompt) for s in self.samples]
        self.started_version = version


def left_padded(token_lists: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, P) ids and attention mask, each row's tokens at the right end (P the longest row)."""
    width = max(len(t) for t in token_lists)
    ids = torch.full((len(token_lists), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(token_lists), width), dtype=torch.long)
    for i, tokens in enumerate(token_lists):
        if tokens:
            ids[i, width - len(tokens) :] = torch.tensor(tokens, dtype=torch.long)
            mask[i, width - len(tokens) :] = 1
    return ids, mask


def generation_call(samples: list[Sample], pad_token_id: int) -> Batch:
    """The generation inputs of one call: each sample's prompt and response so far, left-padded."""
    ids, mask = left_padded([s.prompt + s.tokens for s in samples], pad_token_id)
    return Batch.from_dict(tensors={GEN_KEYS[0]: ids, GEN_KEYS[1]: mask, GEN_KEYS[2]: position_ids_from(mask)})


def finished_batch(groups: list[SampleGroup], pad_token_id: int, max_response_length: int, tokenizer: object) -> Batch:
    """The rows of ``groups`` as a synchronous step has them after generation: prompts left-padded to the
    longest, responses right-padded to ``max_response_length``, masks, positions, the behaviour log-probs, the
    response text, and each row's own columns (uid, ground truth, ...)."""
    samples = [s for g in groups for s in g.samples]
    prompts, prompt_mask = left_padded([s.prompt for s in samples], pad_token_id)
    responses = torch.full((len(samples), max_response_length), pad_token_id, dtype=torch.long)
    log_probs = torch.zeros((len(samples), max_response_length), dtype=torch.float32)
    response_mask = torch.zeros((len(samples), max_response_length), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.tokens)
        if n:
            responses[i, :n] = torch.tensor(s.tokens, dtype=torch.long)
            log_probs[i, :n] = torch.tensor(s.log_probs, dtype=torch.float32)
            response_mask[i, :n] = 1
    columns = joined_columns(prompts, prompt_mask, responses, response_mask, response_mask, log_probs)
    texts = tokenizer.batch_decode(responses, skip_special_tokens=True)  # type: ignore[attr-defined]
    batch = Batch.concat([g.rows for g in groups])
    batch.union(Batch.from_dict(tensors=columns, non_tensors={"response_text": texts}))
    return batch


def version_metrics(groups: list[SampleGroup], current: int) -> dict[str, float]:
    """verl's ``fully_async/*`` figures of the samples one step trains on: how many versions behind the
    weights being synced their tokens are, and how many span more than one version (partial rollouts)."""
    samples = [s for g in groups for s in g.samples if s.versions]
    if not samples:
        return {}
    lags = [current - s.versions[0] for s in samples]
    spans = [s.versions[-1] - s.versions[0] for s in samples]
    partial = sum(1 for span in spans if span > 0)
    return {
        "fully_async/current_param_version": float(current),
        "fully_async/staleness/mean": sum(lags) / len(lags),
        "fully_async/max_version_gap": float(max(lags)),
        "fully_async/min_sample_weight_version": float(min(s.versions[0] for s in samples)),
        "fully_async/max_sample_weight_version": float(max(s.versions[-1] for s in samples)),
        "fully_async/partial/total_partial_num": float(partial),
        "fully_async/partial/partial_ratio": partial / len(samples),
        "fully_async/partial/max_partial_span": float(max(spans)),
    }
