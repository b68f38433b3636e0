"""Padding-free forward passes (verl's ``use_remove_padding``): the real tokens of a micro-batch packed
into one sequence, each row keeping its own position ids.

Rows of a rollout batch are left-padded prompts followed by right-padded responses, so with ragged
responses most of a padded (rows x length) micro-batch is padding. Packed, the model computes only real
tokens. Rows stay apart because their position ids restart at 0 and there is no attention mask:
Hugging Face's mask builder (``transformers.masking_utils``) then makes a block-diagonal causal mask for
sdpa/eager/flex, and flash-attention runs its variable-length kernel from the same position ids.

Outputs come back as ``PackedOutput``: values for every packed token, and logits only at the positions
that predict a response token (Hugging Face's ``logits_to_keep``), since prompt positions' logits are
never read. The heads map them back to the padded layout only after the vocabulary dimension is gone
(log-probs, values), so no (rows, length, vocab) tensor is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from hybridrl.algorithms.token_logprobs import TokenScores

if TYPE_CHECKING:
    from hybridrl.protocol import Batch


@dataclass(frozen=True)
class PackedRows:
    """One micro-batch packed: ``input_ids``/``position_ids`` (1, T) over the T real tokens, and where each
    came from (``flat_index`` into the padded rows x length grid of ``shape``). With responses,
    ``response_index`` holds the K packed positions that predict a real response token, and
    ``response_flat`` where that token sits in the (rows, response length) grid ``response_shape``."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    flat_index: torch.Tensor
    shape: tuple[int, int]
    response_index: torch.Tensor | None = None
    response_flat: torch.Tensor | None = None
    response_shape: tuple[int, int] = (0, 0)

    @property
    def num_tokens(self) -> int:
        return int(self.flat_index.numel())

    def unpack_responses(self, per_response: torch.Tensor) -> torch.Tensor:
        """Values at the K response-predicting positions (1, K) back on the (rows, response length) grid."""
        assert self.response_flat is not None, "packed without responses"
        out = per_response.new_zeros(self.response_shape[0] * self.response_shape[1])
        return out.index_copy_(0, self.response_flat, per_response.reshape(-1)).view(self.response_shape)

    def last_token_index(self) -> torch.Tensor:
        """The packed position of each row's last real token (rows,): where a sequence score is read."""
        lengths = torch.zeros(self.shape[0], dtype=torch.long, device=self.flat_index.device)
        lengths.index_add_(0, self.flat_index // self.shape[1], torch.ones_like(self.flat_index))
        return torch.cumsum(lengths, 0) - 1


@dataclass(frozen=True)
class PackedOutput:
    """A model's output on packed rows: ``output`` (1, T, ...) per packed token, or with ``at_responses``
    (1, K, ...) at the positions that predict response tokens only (``PackedRows.response_index``)."""

    output: torch.Tensor
    rows: PackedRows
    at_responses: bool = False


def pack_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_mask: torch.Tensor | None = None,
) -> PackedRows:
    """The real tokens (``attention_mask`` = 1) of every row, in row order, as one sequence. With
    ``response_mask`` (rows, R): the rows end in R response columns (right-padded), and the packed rows
    know which positions predict them."""
    rows, length = input_ids.shape
    flat_mask = attention_mask.reshape(-1)
    flat_index = torch.nonzero(flat_mask, as_tuple=True)[0]
    response_index = response_flat = None
    response_shape = (0, 0)
    if response_mask is not None:
        resp_len = response_mask.shape[1]
        response_flat = torch.nonzero(response_mask.reshape(-1), as_tuple=True)[0]
        # Response token j of row b is predicted by padded position (b, length - R - 1 + j): a real token.
        predicting = (response_flat // resp_len) * length + (length - resp_len - 1) + response_flat % resp_len
        response_index = (torch.cumsum(flat_mask.long(), 0) - 1)[predicting]
        response_shape = (rows, resp_len)
    return PackedRows(
        input_ids=input_ids.reshape(-1)[flat_index].unsqueeze(0),
        position_ids=position_ids.reshape(-1)[flat_index].unsqueeze(0).long(),
        flat_index=flat_index,
        shape=(rows, length),
        response_index=response_index,
        response_flat=response_flat,
        response_shape=response_shape,
    )


def pack_batch(batch: Batch) -> PackedRows:
    """``pack_rows`` of a batch's columns (with its responses where it has them)."""
    t = batch.tensors
    return pack_rows(t["input_ids"], t["attention_mask"], t["position_ids"], t.get("response_mask", None))


def pad_packed(input_ids: torch.Tensor, position_ids: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Extend packed (n, T) ids/positions to ``length`` tokens as a continuation of the last row (pad id 0,
    positions counting on): causal attention keeps every real token's output unchanged, and the mask
    builder sees no new row. Used where a shape must be fixed (sequence parallel, pipeline stages)."""
    extra = length - input_ids.shape[1]
    if extra <= 0:
        return input_ids, position_ids
    step = torch.arange(1, extra + 1, device=position_ids.device).expand(position_ids.shape[0], extra)
    ids = torch.cat([input_ids, input_ids.new_zeros(input_ids.shape[0], extra)], dim=1)
    return ids, torch.cat([position_ids, position_ids[:, -1:] + step], dim=1)


#: What a model pass returns to its head: padded (rows, length, ...) outputs, per packed token, or the
#: response tokens' scores (fused kernels).
ModelOutput = torch.Tensor | PackedOutput | TokenScores
