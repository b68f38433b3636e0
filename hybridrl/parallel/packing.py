"""Padding-free forward passes (verl's ``use_remove_padding``): the real tokens of a micro-batch packed
into one sequence, each row keeping its own position ids.

Rows of a rollout batch are left-padded prompts followed by right-padded responses, so with ragged
responses most of a padded (rows x length) micro-batch is padding. Packed, the model computes only real
tokens. Rows stay apart because their position ids restart at 0 and there is no attention mask:
Hugging Face's mask builder (``transformers.masking_utils``) then makes a block-diagonal causal mask for
sdpa/eager/flex, and flash-attention runs its variable-length kernel from the same position ids.

Outputs come back as ``PackedOutput`` (one value per packed token); the heads map them back to the
padded (rows, length) layout only after the vocabulary dimension is gone (log-probs, values), so no
(rows, length, vocab) tensor is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedRows:
    """One micro-batch packed: ``input_ids``/``position_ids`` (1, T) over the T real tokens, and where each
    came from (``flat_index`` into the padded rows x length grid of ``shape``)."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    flat_index: torch.Tensor
    shape: tuple[int, int]

    @property
    def num_tokens(self) -> int:
        return int(self.flat_index.numel())

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Per-token values (1, T) or (T,) back on the padded grid (rows, length); padding gets 0."""
        values = packed.reshape(-1)[: self.num_tokens]
        out = values.new_zeros(self.shape[0] * self.shape[1])
        return out.index_copy_(0, self.flat_index, values).view(self.shape)

    def next_tokens(self) -> torch.Tensor:
        """The token each packed position predicts (1, T). At a row's last token this is the next row's
        first token: a position no response token is read from (it predicts past the row's end)."""
        return torch.roll(self.input_ids, shifts=-1, dims=1)

    def last_token_index(self) -> torch.Tensor:
        """The packed position of each row's last real token (rows,): where a sequence score is read."""
        lengths = torch.zeros(self.shape[0], dtype=torch.long, device=self.flat_index.device)
        lengths.index_add_(0, self.flat_index // self.shape[1], torch.ones_like(self.flat_index))
        return torch.cumsum(lengths, 0) - 1


@dataclass(frozen=True)
class PackedOutput:
    """A model's output on packed rows: ``output`` (1, T, ...) per packed token (logits or values)."""

    output: torch.Tensor
    rows: PackedRows


def pack_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> PackedRows:
    """The real tokens (``attention_mask`` = 1) of every row, in row order, as one sequence."""
    rows, length = input_ids.shape
    flat_index = torch.nonzero(attention_mask.reshape(-1), as_tuple=True)[0]
    return PackedRows(
        input_ids=input_ids.reshape(-1)[flat_index].unsqueeze(0),
        position_ids=position_ids.reshape(-1)[flat_index].unsqueeze(0).long(),
        flat_index=flat_index,
        shape=(rows, length),
    )


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


#: What a model pass returns to its head: padded (rows, length, ...) outputs, or per packed token.
ModelOutput = torch.Tensor | PackedOutput
