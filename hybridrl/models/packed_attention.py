"""Attention for packed rows that never builds a (tokens x tokens) mask.

A packed micro-batch (``hybridrl.engine.packing``) is one sequence of T tokens holding many documents,
told apart by position ids that restart at 0. Under ``sdpa`` Hugging Face turns that into a block-diagonal
(T x T) mask and the kernel computes the whole square: on an H200, 16k tokens in 16 documents took 19.3 ms
forward + backward per layer against 1.4 ms for a variable-length kernel, and attention was 58% of the
packed update's GPU time. This module registers one attention implementation with transformers
(``PACKED_ATTENTION``) that runs each document on its own:

- CUDA, half precision: flash-attn's ``flash_attn_varlen_func`` where that package is installed, else
  PyTorch's own ``torch.nn.attention.varlen.varlen_attn`` (its signature differs between releases: causal
  is ``is_causal`` or ``window_size=(-1, 0)``, grouped-query attention ``enable_gqa`` or native);
- anywhere else (CPU, fp32): scaled-dot-product attention per document, causal, no mask.

No mask function is registered for the name's mask step but flash-attention's, which returns a padding
mask only where a padded batch has padding: so the model never builds the square. Document boundaries come
from transformers' ``cu_seq_lens_q``/``max_length_q`` keyword arguments when a caller passes them, else from
the position ids every decoder layer forwards (computed once per forward, not once per layer).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

from hybridrl.models.ulysses import SequenceShard, shard_of

logger = logging.getLogger(__name__)

#: The ``attn_implementation`` name models of packed rows are built with.
PACKED_ATTENTION = "hybridrl_packed"


@dataclass(frozen=True)
class Documents:
    """Where each document of a flattened (T,) token sequence starts and ends: ``cu`` (N + 1,) int32 on
    the device, the same offsets as a host list (``bounds``), and the longest document."""

    cu: torch.Tensor
    bounds: tuple[int, ...]
    max_len: int

    @classmethod
    def from_lengths(cls, lengths: list[int], device: torch.device) -> Documents:
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + int(n))
        return cls(torch.tensor(bounds, dtype=torch.int32, device=device), tuple(bounds), max(lengths, default=0))

    @classmethod
    def from_positions(cls, position_ids: torch.Tensor) -> Documents:
        """Documents of ``position_ids`` (rows, L) flattened row after row: a document starts where a
        position does not continue the previous one (a restart, or a new row)."""
        flat = position_ids.reshape(-1)
        starts = torch.ones_like(flat, dtype=torch.bool)
        starts[1:] = flat[1:] != flat[:-1] + 1
        length = position_ids.shape[-1]
        starts[::length] = True
        first = torch.nonzero(starts).flatten().tolist()  # one host sync per forward (cached below)
        first.append(flat.numel())
        return cls.from_lengths([b - a for a, b in zip(first[:-1], first[1:])], position_ids.device)


class _DocumentsCache:
    """The documents of the last position-id tensor seen: every layer of one forward (and its recompute
    under activation checkpointing) passes the same tensor, so the host sync happens once per forward."""

    def __init__(self) -> None:
        self._key: weakref.ref | None = None
        self._version = -1
        self._docs: Documents | None = None

    def get(self, position_ids: torch.Tensor, shard: SequenceShard | None = None) -> Documents:
        """With ``shard``, ``position_ids`` is this rank's slice: the documents are the whole sequence's."""
        key = self._key() if self._key is not None else None
        if key is not position_ids or self._version != position_ids._version or self._docs is None:
            self._docs = Documents.from_positions(position_ids if shard is None else shard.positions(position_ids))
            self._key = weakref.ref(position_ids)
            self._version = position_ids._version
        return self._docs


_documents = _DocumentsCache()
_sharded_documents = _DocumentsCache()  # sequence-parallel layers: the gather of positions, once per forward


# -- kernels: (T, H, D) query, (T, Hkv, D) key/value, documents -> (T, H, D) ---------------------------------
def _varlen_kernel() -> tuple[str, Any] | None:
    """The fastest variable-length kernel installed: ("flash_attn", fn), ("torch", fn) or None."""
    if importlib.util.find_spec("flash_attn") is not None:
        try:
            from flash_attn import flash_attn_varlen_func  # noqa: PLC0415 (optional package)

            return "flash_attn", flash_attn_varlen_func
        except ImportError as exc:  # installed but built for another torch/CUDA
            logger.warning("flash-attn is installed but does not load (%s); using PyTorch's varlen kernel.", exc)
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: PLC0415 (torch >= 2.10 only)
    except ImportError:
        return None
    return "torch", varlen_attn


class _Kernels:
    """Which kernel runs, decided once per process and said once."""

    def __init__(self) -> None:
        self._varlen: tuple[str, Any] | None | bool = False  # False: not looked up yet
        self._torch_params: frozenset[str] = frozenset()
        self.native_gqa = True  # torch's kernel without enable_gqa: tried once with fewer K/V heads
        self.announced: set[str] = set()

    def varlen(self) -> tuple[str, Any] | None:
        if self._varlen is False:
            self._varlen = _varlen_kernel()
            if self._varlen is not None and self._varlen[0] == "torch":
                self._torch_params = frozenset(inspect.signature(self._varlen[1]).parameters)
        return self._varlen  # type: ignore[return-value]

    def torch_kwargs(self, window: int | None) -> dict[str, Any]:
        left = -1 if window is None else window - 1
        if "window_size" in self._torch_params:
            return {"window_size": (left, 0)}
        if window is not None:
            raise NotImplementedError("this torch's varlen_attn has no sliding window")
        return {"is_causal": True}

    def announce(self, name: str) -> None:
        if name not in self.announced:
            self.announced.add(name)
            logger.info("Packed rows: attention runs per document with %s (no tokens x tokens mask).", name)


_kernels = _Kernels()


def _repeat_kv(tensor: torch.Tensor, groups: int) -> torch.Tensor:
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=1)


def _torch_varlen(
    fn: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, docs: Documents, scale: float | None, window: int | None
) -> torch.Tensor:
    kwargs: dict[str, Any] = {"scale": scale, **_kernels.torch_kwargs(window)}
    # (T, H, D) views of the (1, H, T, D) projections: a copy of a few MB per layer, against kernels
    # that may want dense token-major input.
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    groups = q.shape[1] // k.shape[1]
    if groups > 1 and "enable_gqa" in _kernels._torch_params:
        kwargs["enable_gqa"] = True
    elif groups > 1 and _kernels.native_gqa:
        try:
            return fn(q, k, v, docs.cu, docs.cu, docs.max_len, docs.max_len, **kwargs)
        except (RuntimeError, ValueError) as exc:  # a kernel that wants as many K/V heads as query heads
            _kernels.native_gqa = False
            logger.info("varlen_attn takes no grouped K/V heads here (%s): repeating them.", str(exc)[:120])
    if groups > 1 and "enable_gqa" not in kwargs:
        k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
    return fn(q, k, v, docs.cu, docs.cu, docs.max_len, docs.max_len, **kwargs)


def _per_document(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    docs: Documents,
    scale: float | None,
    window: int | None,
    dropout: float,
) -> torch.Tensor:
    """Causal attention of each document on its own: linear in documents, never a (T x T) mask. The
    fallback on CPU, in fp32, and wherever no variable-length kernel exists."""
    groups = q.shape[1] // k.shape[1]
    outs = []
    for a, b in zip(docs.bounds[:-1], docs.bounds[1:]):
        qd, kd, vd = (x[a:b].transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # (1, H, len, D)
        mask = None
        if window is not None and b - a > window:  # a band inside the document: (len x len) at most
            i = torch.arange(b - a, device=q.device)
            mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
        out = F.scaled_dot_product_attention(
            qd, kd, vd, attn_mask=mask, is_causal=mask is None, dropout_p=dropout, scale=scale, enable_gqa=groups > 1
        )
        outs.append(out[0].transpose(0, 1))
    return torch.cat(outs, dim=0) if outs else q.new_empty(q.shape)


def packed_documents(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, docs: Documents, **options: Any
) -> torch.Tensor:
    """Causal attention of (T, H, D) queries over (T, Hkv, D) keys/values, each document on its own, with
    the fastest kernel this device and dtype have. ``options``: ``scale``, ``window`` (sliding window or
    None), ``dropout``."""
    scale, window, dropout = options.get("scale"), options.get("window"), float(options.get("dropout", 0.0))
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and dropout == 0.0:
        kernel = _kernels.varlen()
        if kernel is not None:
            name, fn = kernel
            _kernels.announce(f"{name} varlen")
            if name == "flash_attn":
                size = (-1, -1) if window is None else (window - 1, 0)
                return fn(
                    q,
                    k,
                    v,
                    docs.cu,
                    docs.cu,
                    docs.max_len,
                    docs.max_len,
                    softmax_scale=scale,
                    causal=True,
                    window_size=size,
                )
            return _torch_varlen(fn, q, k, v, docs, scale, window)
    _kernels.announce("scaled_dot_product_attention per document")
    return _per_document(q, k, v, docs, scale, window, dropout)


# -- the transformers attention function -----------------------------------------------------------------
def _padded_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scale: float | None,
    dropout: float,
) -> torch.Tensor:
    """Plain (batch, heads, q, kv) attention for calls that are not packed (a padded batch, decoding with a
    cache): causal aligned to the last key, with the 2D padding mask where there is one."""
    q_len, kv_len = query.shape[2], key.shape[2]
    gqa = query.shape[1] != key.shape[1]
    if attention_mask is None and q_len == kv_len:
        return F.scaled_dot_product_attention(
            query, key, value, is_causal=True, dropout_p=dropout, scale=scale, enable_gqa=gqa
        )
    i = torch.arange(q_len, device=query.device)[:, None] + (kv_len - q_len)
    mask = i >= torch.arange(kv_len, device=query.device)[None, :]  # (q, kv)
    mask = mask[None, None]
    if attention_mask is not None:
        mask = mask & attention_mask[:, None, None, -kv_len:].bool()
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, dropout_p=dropout, scale=scale, enable_gqa=gqa
    )


def packed_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: (B, H, q, D) query, (B, Hkv, kv, D) key/value ->
    ((B, q, H, D) output, no weights)."""
    if kwargs.get("softcap") is not None:
        raise ValueError(
            f"{type(module).__name__} caps its attention logits (softcap): packed rows need flash-attn for that; "
            f"install flash-attn or set use_remove_padding=false."
        )
    batch, heads, q_len, dim = query.shape
    window = kwargs.get("sliding_window")
    shard = shard_of(module)
    if shard is not None:
        return _sequence_parallel(shard, query, key, value, kwargs.get("position_ids"), scaling, window, dropout), None
    docs: Documents | None = None
    if attention_mask is None and q_len == key.shape[2] and kwargs.get("position_ids") is not None:
        docs = _documents.get(kwargs["position_ids"])
    if docs is None or len(docs.bounds) - 1 == batch:  # one document per row: a plain causal batch
        out = _padded_attention(query, key, value, attention_mask, scaling, dropout)
        return out.transpose(1, 2), None
    # (B, H, L, D) -> (B * L, H, D): packed rows are contiguous in the token dimension
    q, k, v = (x.transpose(1, 2).reshape(-1, x.shape[1], dim) for x in (query, key, value))
    out = packed_documents(q, k, v, docs, scale=scaling, window=window, dropout=dropout)
    return out.view(batch, q_len, heads, dim), None


def _sequence_parallel(
    shard: SequenceShard,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    position_ids: torch.Tensor | None,
    scale: float | None,
    window: int | None,
    dropout: float,
) -> torch.Tensor:
    """Attention of this rank's slice of one packed sequence under Ulysses (``hybridrl.models.ulysses``):
    heads exchanged for tokens, each document attended on its own, exchanged back. (1, H, L/sp, D) in,
    (1, L/sp, H, D) out."""
    if query.shape[0] != 1 or position_ids is None:
        raise ValueError(
            "Ulysses sequence parallelism runs on one packed row with its position ids (use_remove_padding)."
        )
    docs = _sharded_documents.get(position_ids, shard)
    q = shard.heads_to_sequence(query)
    k, v = (shard.heads_to_sequence(shard.repeat_kv(x)) for x in (key, value))
    out = packed_documents(q, k, v, docs, scale=scale, window=window, dropout=dropout)
    return shard.sequence_to_heads(out)


def register() -> str:
    """Make ``PACKED_ATTENTION`` a valid ``attn_implementation`` (idempotent); returns the name."""
    AttentionInterface.register(PACKED_ATTENTION, packed_attention_forward)
    # Only a padding mask, never the (T x T) square: flash-attention's mask step.
    ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_ATTENTION, flash_attention_mask)
    return PACKED_ATTENTION
