"""The batch type that travels between the Ray driver and the workers.

A :class:`Batch` bundles three kinds of data so that one object can carry a whole
rollout step across process boundaries:

* ``tensors``: a :class:`tensordict.TensorDict` with ``batch_size=[N]``,
* ``non_tensors``: per-row Python objects (prompts, ground truths, dicts) stored as
  1-D numpy object arrays of length ``N``,
* ``meta``: free-form, not per-row information (e.g. ``{"temperature": 1.0}``).

All row operations (indexing, split, concat, repeat, padding) act on tensors and
non-tensors together so the rows never get out of step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase

Index = slice | Sequence[int] | np.ndarray | torch.Tensor


def _to_object_array(values: Sequence | np.ndarray) -> np.ndarray:
    """Convert a column to a 1-D object array, one element per row."""
    if isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1:
        return values
    if isinstance(values, (str, bytes)):
        raise TypeError("a non-tensor column must be a sequence of rows, not a single str/bytes")
    # np.array(list_of_lists) would build a 2-D array (and a list of dicts of equal
    # shape can broadcast oddly), so allocate the 1-D object array and fill it row by row.
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _values_equal(a: Any, b: Any) -> bool:
    """Deep equality for tensors, arrays and containers (``==`` is ambiguous for them)."""
    if a is b:
        return True
    if isinstance(a, TensorDictBase) or isinstance(b, TensorDictBase):  # nested tensor columns
        if not (isinstance(a, TensorDictBase) and isinstance(b, TensorDictBase)):
            return False
        keys = set(a.keys(True, True))
        return keys == set(b.keys(True, True)) and all(_values_equal(a[k], b[k]) for k in keys)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.is_floating_point() or a.is_complex():  # treat NaN as equal to NaN
            return bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())
        return torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype == object or b.dtype == object:
            return all(_values_equal(x, y) for x, y in zip(a.ravel(), b.ravel()))
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_values_equal, a, b))
    try:
        return bool(a == b)
    except Exception:  # objects whose == is not a plain bool
        return False


def _normalize_index(idx: Index, n: int) -> slice | np.ndarray:
    """Turn any supported row selector into a slice or an int64 numpy index array."""
    if isinstance(idx, slice):
        return idx
    if isinstance(idx, (int, np.integer)):
        raise TypeError(f"integer indexing is not supported (got {idx!r}); use batch[i:i + 1] or batch[[i]]")
    arr = idx.detach().cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
    if arr.ndim != 1:
        raise TypeError(f"row index must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype == bool:
        if len(arr) != n:
            raise ValueError(f"boolean mask has length {len(arr)}, expected {n}")
        return np.flatnonzero(arr)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"row index must hold integers or bools, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _owned(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself, or a contiguous copy where its storage holds more bytes than its elements.

    Pickle ships a tensor's whole storage, so a view into a larger one is copied; a tensor that already owns its storage is
    shared, and an expanded one (stride 0, storage smaller than its elements) is cheaper sent as it is.
    Numpy object columns need nothing: a sliced object array pickles only its own elements.
    """
    if t.untyped_storage().nbytes() > t.numel() * t.element_size():
        return t.clone(memory_format=torch.contiguous_format)
    return t


_NARROW_INTS = (torch.int8, torch.int16, torch.int32)


def _narrowest(t: torch.Tensor) -> torch.Tensor:
    """An integer tensor in the narrowest integer dtype that holds its values (masks in int8, token ids of a
    152k vocabulary in int32): ids and masks are a third or more of a rollout batch's bytes in int64."""
    if t.dtype not in (torch.int64, torch.int32, torch.int16) or t.numel() == 0:
        return t
    low, high = int(t.min()), int(t.max())
    for dtype in _NARROW_INTS:
        info = torch.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return t.to(dtype) if dtype != t.dtype else t
    return t


def _for_transfer(t: torch.Tensor) -> torch.Tensor:
    return _owned(_narrowest(t))


def _widened(t: torch.Tensor) -> torch.Tensor:
    return t.long() if t.dtype in _NARROW_INTS else t


def _check_keys(available: Any, requested: Sequence[Any], kind: str) -> None:
    """Raise a KeyError that lists what is there, so typos are easy to spot."""
    avail = list(available)
    for k in requested:
        if k not in avail:
            raise KeyError(f"{kind} key {k!r} not found; available {kind} keys: {avail}")


@dataclass(eq=False)  # field-wise == on a TensorDict is not a bool
class Batch:
    """N rows of tensors + per-row objects, plus batch-level metadata."""

    tensors: TensorDict
    non_tensors: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tensors.batch_dims != 1:
            raise ValueError(f"tensors must have a 1-D batch_size, got {list(self.tensors.batch_size)}")
        n = self.tensors.batch_size[0]
        for key, arr in self.non_tensors.items():
            if not isinstance(arr, np.ndarray) or arr.dtype != object or arr.ndim != 1:
                raise TypeError(f"non-tensor column {key!r} must be a 1-D numpy object array; use Batch.from_dict")
            if len(arr) != n:
                raise ValueError(f"non-tensor column {key!r} has length {len(arr)}, expected {n}")

    @classmethod
    def from_dict(
        cls,
        tensors: Mapping[str, torch.Tensor] | None = None,
        non_tensors: Mapping[str, Sequence | np.ndarray] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Batch:
        """Build a batch from plain columns, checking that every column has the same length."""
        tensors, non_tensors = dict(tensors or {}), dict(non_tensors or {})
        expected: int | None = None
        ref = ""
        for key, t in tensors.items():
            if not isinstance(t, torch.Tensor) or t.ndim == 0:
                raise ValueError(f"tensor column {key!r} must be a tensor with a batch dimension")
            if expected is None:
                expected, ref = t.shape[0], key
            elif t.shape[0] != expected:
                raise ValueError(f"column {key!r} has length {t.shape[0]}, expected {expected} (length of {ref!r})")
        cols = {k: _to_object_array(v) for k, v in non_tensors.items()}
        for key, arr in cols.items():
            if expected is None:
                expected, ref = len(arr), key
            elif len(arr) != expected:
                raise ValueError(f"column {key!r} has length {len(arr)}, expected {expected} (length of {ref!r})")
        td = TensorDict(tensors, batch_size=[expected or 0])
        return cls(tensors=td, non_tensors=cols, meta=dict(meta or {}))

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        return self.tensors.batch_size[0]

    @property
    def batch_size(self) -> int:
        """Number of rows."""
        return len(self)

    def keys(self) -> list[str]:
        """Tensor keys then non-tensor keys (meta is not per-row, so not included)."""
        return [*self.tensors.keys(), *self.non_tensors.keys()]

    def __contains__(self, key: object) -> bool:
        return (isinstance(key, str) and key in self.tensors.keys()) or key in self.non_tensors

    def __repr__(self) -> str:
        return (
            f"Batch(len={len(self)}, tensors={list(self.tensors.keys())}, "
            f"non_tensors={list(self.non_tensors)}, meta={list(self.meta)})"
        )

    def __getitem__(self, idx: Index) -> Batch:
        """Select rows (slice, int list/array/LongTensor or bool mask); meta is shallow-copied. A slice is a
        view: :meth:`compact` it before it leaves the process."""
        norm = _normalize_index(idx, len(self))
        td = self.tensors[norm] if isinstance(norm, slice) else self.tensors[torch.from_numpy(norm)]
        cols = {k: v[norm] for k, v in self.non_tensors.items()}
        return Batch(tensors=td, non_tensors=cols, meta=dict(self.meta))

    def compact(self) -> Batch:
        """A copy whose tensors hold just their own rows: call it on what leaves the process.

        Row selections (``__getitem__``, ``split``, ``minibatches``) stay views, free for in-process use
        such as micro-batches; but pickling a view ships its whole storage, so a 1/8 shard would cost as
        much as the batch it came from. A separate method, rather than a copying ``split``, so the one
        place that sends batches (``WorkerGroup.call_split``) decides, whatever selection made them.

        Integer tensors (ids, masks, positions) also travel in the narrowest integer dtype that holds them;
        the receiver restores int64 with :meth:`widened`, so code on either side sees what it always did.
        """
        td = cast(TensorDict, self.tensors.apply(_for_transfer))  # apply returns None only for in-place use
        return Batch(tensors=td, non_tensors=dict(self.non_tensors), meta=dict(self.meta))

    def widened(self) -> Batch:
        """Integer tensors back in int64 (after a transfer in narrow dtypes, see :meth:`compact`)."""
        td = cast(TensorDict, self.tensors.apply(_widened))
        return Batch(tensors=td, non_tensors=dict(self.non_tensors), meta=dict(self.meta))

    def to(self, device: torch.device | str) -> Batch:
        """Move tensors to ``device``; non-tensors stay host-side Python objects."""
        return Batch(tensors=self.tensors.to(device), non_tensors=dict(self.non_tensors), meta=dict(self.meta))

    # ------------------------------------------------------------ row reshaping
    def split(self, n_chunks: int) -> list[Batch]:
        """Split into ``n_chunks`` equal, ordered chunks (one per data-parallel worker)."""
        if n_chunks <= 0:
            raise ValueError(f"n_chunks must be positive, got {n_chunks}")
        if len(self) % n_chunks:
            raise ValueError(
                f"batch of length {len(self)} cannot be split into {n_chunks} equal chunks; "
                f"call pad_to_divisor({n_chunks}) first and unpad() afterwards"
            )
        c = len(self) // n_chunks
        return [self[i * c : (i + 1) * c] for i in range(n_chunks)]

    def minibatches(self, size: int) -> list[Batch]:
        """Consecutive chunks of exactly ``size`` rows (e.g. PPO minibatches)."""
        if size <= 0:
            raise ValueError(f"minibatch size must be positive, got {size}")
        if len(self) % size:
            raise ValueError(f"batch of length {len(self)} is not divisible by minibatch size {size}")
        return [self[i : i + size] for i in range(0, len(self), size)]

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Concatenate rows (e.g. gather worker outputs); keys must match, meta is merged."""
        if not batches:
            raise ValueError("Batch.concat needs at least one batch")
        first = batches[0]
        ref_t = set(first.tensors.keys(include_nested=True, leaves_only=True))
        ref_n = set(first.non_tensors)
        meta = dict(first.meta)
        for i, b in enumerate(batches[1:], start=1):
            keys_t = set(b.tensors.keys(include_nested=True, leaves_only=True))
            for kind, ref, got in (("tensor", ref_t, keys_t), ("non-tensor", ref_n, set(b.non_tensors))):
                for k in sorted(ref - got, key=str):
                    raise ValueError(f"{kind} key {k!r} is present in batch 0 but missing in batch {i}")
                for k in sorted(got - ref, key=str):
                    raise ValueError(f"{kind} key {k!r} is present in batch {i} but missing in batch 0")
            for k, v in b.meta.items():
                if k in meta and not _values_equal(meta[k], v):
                    raise ValueError(f"meta key {k!r} conflicts: {meta[k]!r} vs {v!r} (batch {i})")
                meta.setdefault(k, v)
        td = cast(TensorDict, torch.cat([b.tensors for b in batches], dim=0))
        cols = {k: np.concatenate([b.non_tensors[k] for b in batches]) for k in first.non_tensors}
        return Batch(tensors=td, non_tensors=cols, meta=meta)

    def repeat(self, n: int, interleave: bool = True) -> Batch:
        """Repeat rows ``n`` times: a,a,b,b if ``interleave`` (n samples per prompt), else a,b,a,b."""
        if n < 1:
            raise ValueError(f"repeat count must be >= 1, got {n}")
        if interleave:
            td = self.tensors.repeat_interleave(n, dim=0)
            cols = {k: np.repeat(v, n) for k, v in self.non_tensors.items()}
        else:
            td = self.tensors.repeat(n)
            cols = {k: np.tile(v, n) for k, v in self.non_tensors.items()}
        return Batch(tensors=td, non_tensors=cols, meta=dict(self.meta))

    def pad_to_divisor(self, divisor: int) -> tuple[Batch, int]:
        """Append copies of leading rows (cycling) so the length divides by ``divisor``; returns (batch, pad)."""
        if divisor <= 0:
            raise ValueError(f"divisor must be positive, got {divisor}")
        pad = -len(self) % divisor
        if pad == 0:
            return self[:], 0
        return Batch.concat([self, self[np.arange(pad) % len(self)]]), pad

    def unpad(self, pad: int) -> Batch:
        """Drop the last ``pad`` rows added by :meth:`pad_to_divisor`."""
        if not 0 <= pad <= len(self):
            raise ValueError(f"pad must be in [0, {len(self)}], got {pad}")
        return self if pad == 0 else self[: len(self) - pad]

    def shuffle(self, generator: torch.Generator) -> Batch:
        """Return a row-permuted copy; the same generator state gives the same permutation."""
        return self[torch.randperm(len(self), generator=generator)]

    # ------------------------------------------------------------- key editing
    def select(
        self,
        tensor_keys: Sequence[str] | None = None,
        non_tensor_keys: Sequence[str] | None = None,
        meta_keys: Sequence[str] | None = None,
    ) -> Batch:
        """Keep only the named keys; ``None`` keeps every key of that kind (verl semantics)."""
        td = self.tensors
        if tensor_keys is not None:
            _check_keys(td.keys(), tensor_keys, "tensor")
            td = td.select(*tensor_keys)
        cols, meta = dict(self.non_tensors), dict(self.meta)
        if non_tensor_keys is not None:
            _check_keys(cols, non_tensor_keys, "non-tensor")
            cols = {k: cols[k] for k in non_tensor_keys}
        if meta_keys is not None:
            _check_keys(meta, meta_keys, "meta")
            meta = {k: meta[k] for k in meta_keys}
        return Batch(tensors=td, non_tensors=cols, meta=meta)

    def pop(
        self,
        tensor_keys: Sequence[str] = (),
        non_tensor_keys: Sequence[str] = (),
        meta_keys: Sequence[str] = (),
    ) -> Batch:
        """Remove the named keys from ``self`` and return them as a new batch of the same length."""
        # Validate everything first so a bad key leaves ``self`` untouched.
        _check_keys(self.tensors.keys(), tensor_keys, "tensor")
        _check_keys(self.non_tensors, non_tensor_keys, "non-tensor")
        _check_keys(self.meta, meta_keys, "meta")
        td = TensorDict({k: self.tensors.pop(k) for k in tensor_keys}, batch_size=self.tensors.batch_size)
        cols = {k: self.non_tensors.pop(k) for k in non_tensor_keys}
        meta = {k: self.meta.pop(k) for k in meta_keys}
        return Batch(tensors=td, non_tensors=cols, meta=meta)

    def union(self, other: Batch) -> Batch:
        """Merge ``other``'s keys into ``self`` (in place) and return ``self``; equal duplicates are fine."""
        if len(other) != len(self):
            raise ValueError(f"cannot union batches of length {len(self)} and {len(other)}")
        pairs: list[tuple[str, Any, Any]] = [
            ("tensor", self.tensors, other.tensors),
            ("non-tensor", self.non_tensors, other.non_tensors),
            ("meta", self.meta, other.meta),
        ]
        for kind, mine, theirs in pairs:
            for k in theirs.keys():
                if k in mine.keys() and not _values_equal(mine[k], theirs[k]):
                    raise ValueError(f"{kind} key {k!r} exists in both batches with different values")
        self.tensors.update(other.tensors)
        self.non_tensors.update(other.non_tensors)
        self.meta.update(other.meta)
        return self
