"""Unit tests for hybridrl.protocol.Batch."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from ray import cloudpickle
from tensordict import TensorDict

from hybridrl.protocol import Batch


def make(n: int = 4, **meta) -> Batch:
    """Rows are identifiable: row i has ids == i, text f"p{i}", a list and a dict."""
    return Batch.from_dict(
        tensors={"ids": torch.arange(n), "logp": torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)},
        non_tensors={
            "text": [f"p{i}" for i in range(n)],
            "gt": [[i, i + 1] for i in range(n)],
            "info": [{"row": i} for i in range(n)],
        },
        meta=meta or {"temperature": 1.0},
    )


def ids(b: Batch) -> list[int]:
    return b.tensors["ids"].tolist()


def assert_rows_consistent(b: Batch) -> None:
    """Tensors and non-tensors must still describe the same rows."""
    for i, row in enumerate(ids(b)):
        assert b.non_tensors["text"][i] == f"p{row}"
        assert b.non_tensors["gt"][i] == [row, row + 1]
        assert b.non_tensors["info"][i] == {"row": row}
        assert torch.equal(b.tensors["logp"][i], torch.arange(row * 3, row * 3 + 3, dtype=torch.float32))


def assert_batches_equal(a: Batch, b: Batch) -> None:
    assert len(a) == len(b)
    assert set(a.tensors.keys()) == set(b.tensors.keys())
    for k in a.tensors.keys():
        assert torch.equal(a.tensors[k], b.tensors[k]) and a.tensors[k].dtype == b.tensors[k].dtype
    assert a.non_tensors.keys() == b.non_tensors.keys()
    for k in a.non_tensors:
        assert a.non_tensors[k].dtype == object and a.non_tensors[k].shape == b.non_tensors[k].shape
        assert list(a.non_tensors[k]) == list(b.non_tensors[k])
    assert a.meta == b.meta


# ----------------------------------------------------------------- from_dict
def test_from_dict_builds_1d_object_arrays_for_lists_and_dicts():
    b = make(3)
    assert len(b) == b.batch_size == 3
    assert isinstance(b.tensors, TensorDict) and b.tensors.batch_size == torch.Size([3])
    for k in ("text", "gt", "info"):
        assert b.non_tensors[k].dtype == object and b.non_tensors[k].shape == (3,)
    assert b.non_tensors["gt"][1] == [1, 2]
    assert b.non_tensors["info"][2] == {"row": 2}
    assert b.meta == {"temperature": 1.0}
    assert_rows_consistent(b)


def test_from_dict_converts_numpy_and_2d_arrays_row_wise():
    b = Batch.from_dict(non_tensors={"a": np.array([1, 2]), "m": np.zeros((2, 3))})
    assert len(b) == 2 and b.non_tensors["a"].dtype == object
    assert b.non_tensors["m"].shape == (2,) and b.non_tensors["m"][0].shape == (3,)


def test_from_dict_empty_and_non_tensor_only():
    assert len(Batch.from_dict()) == 0
    b = Batch.from_dict(non_tensors={"x": ["a", "b"]})
    assert len(b) == 2 and b.tensors.batch_size == torch.Size([2])


def test_from_dict_tensor_length_mismatch_names_column_and_lengths():
    with pytest.raises(ValueError, match=r"'b'.*length 3.*expected 2"):
        Batch.from_dict(tensors={"a": torch.zeros(2), "b": torch.zeros(3)})


def test_from_dict_non_tensor_length_mismatch_names_column_and_lengths():
    with pytest.raises(ValueError, match=r"'txt'.*length 1.*expected 2"):
        Batch.from_dict(tensors={"a": torch.zeros(2)}, non_tensors={"txt": ["x"]})


def test_from_dict_rejects_scalar_tensor_and_plain_string_column():
    with pytest.raises(ValueError, match="'s'"):
        Batch.from_dict(tensors={"s": torch.tensor(1.0)})
    with pytest.raises(TypeError):
        Batch.from_dict(non_tensors={"t": "abc"})


def test_direct_construction_validates_non_tensor_length():
    with pytest.raises(ValueError, match=r"'x'.*length 1.*expected 2"):
        Batch(tensors=TensorDict({}, batch_size=[2]), non_tensors={"x": np.empty(1, dtype=object)})


# ------------------------------------------------------------------ indexing
@pytest.mark.parametrize(
    "idx, expected",
    [
        (slice(1, 3), [1, 2]),
        ([3, 0], [3, 0]),
        (np.array([2, 2, 1]), [2, 2, 1]),
        (torch.tensor([0, 3], dtype=torch.long), [0, 3]),
        (torch.tensor([True, False, True, False]), [0, 2]),
        (np.array([False, True, True, False]), [1, 2]),
        ([], []),
    ],
)
def test_getitem_row_selection(idx, expected):
    b = make(4)
    sub = b[idx]
    assert ids(sub) == expected
    assert_rows_consistent(sub)
    assert sub.meta == b.meta and sub.meta is not b.meta


def test_getitem_errors():
    b = make(4)
    with pytest.raises(TypeError, match="integer indexing"):
        b[1]
    with pytest.raises(ValueError, match="length 3, expected 4"):
        b[torch.tensor([True, False, True])]
    with pytest.raises(TypeError, match="float"):
        b[np.array([0.5])]


def test_contains_and_keys():
    b = make(2)
    assert "ids" in b and "text" in b and "temperature" not in b and "nope" not in b
    assert b.keys() == ["ids", "logp", "text", "gt", "info"]


def test_to_device_keeps_everything():
    b = make(2).to("cpu")
    assert b.tensors.device == torch.device("cpu")
    assert_rows_consistent(b)


# --------------------------------------------------------- split / minibatch
def test_split_equal_chunks_in_order():
    parts = make(6).split(3)
    assert [ids(p) for p in parts] == [[0, 1], [2, 3], [4, 5]]
    for p in parts:
        assert_rows_consistent(p)


def test_split_error_names_numbers_and_hint():
    with pytest.raises(ValueError, match=r"length 5.*3.*pad_to_divisor"):
        make(5).split(3)
    with pytest.raises(ValueError, match="positive"):
        make(5).split(0)


def test_minibatches():
    assert [ids(m) for m in make(6).minibatches(2)] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match=r"length 6.*size 4"):
        make(6).minibatches(4)
    with pytest.raises(ValueError, match="positive"):
        make(6).minibatches(0)


# -------------------------------------------------------------------- concat
def test_concat_rows_and_meta_merge():
    a, b = make(4)[:2], make(4)[2:]
    b.meta["step"] = 7
    out = Batch.concat([a, b])
    assert ids(out) == [0, 1, 2, 3]
    assert_rows_consistent(out)
    assert out.meta == {"temperature": 1.0, "step": 7}


def test_concat_meta_conflict_names_key():
    a, b = make(2), make(2, temperature=0.5)
    with pytest.raises(ValueError, match="'temperature'"):
        Batch.concat([a, b])


def test_concat_missing_keys_are_named():
    a, b = make(2), make(2)
    b.pop(tensor_keys=["logp"])
    with pytest.raises(ValueError, match=r"'logp'.*missing in batch 1"):
        Batch.concat([a, b])
    with pytest.raises(ValueError, match=r"'logp'.*missing in batch 0"):
        Batch.concat([b, a])
    c = make(2)
    c.pop(non_tensor_keys=["gt"])
    with pytest.raises(ValueError, match=r"non-tensor key 'gt'"):
        Batch.concat([a, c])
    with pytest.raises(ValueError, match="at least one"):
        Batch.concat([])


# -------------------------------------------------------------------- repeat
def test_repeat_interleave_and_tile():
    b = make(2)
    inter = b.repeat(3)
    assert ids(inter) == [0, 0, 0, 1, 1, 1]
    assert_rows_consistent(inter)
    tiled = b.repeat(2, interleave=False)
    assert ids(tiled) == [0, 1, 0, 1]
    assert_rows_consistent(tiled)
    assert tiled.non_tensors["gt"].shape == (4,)
    with pytest.raises(ValueError, match="got 0"):
        b.repeat(0)


def test_repeat_split_concat_round_trip():
    b = make(4)
    rep = b.repeat(2)
    parts = rep.split(4)
    assert all(len(p) == 2 for p in parts)
    back = Batch.concat(parts)
    assert_batches_equal(back, rep)
    # every chunk holds the two samples of one prompt
    assert [ids(p) for p in parts] == [[0, 0], [1, 1], [2, 2], [3, 3]]


# ------------------------------------------------------------ pad / unpad
def test_pad_unpad_round_trip():
    b = make(5)
    padded, pad = b.pad_to_divisor(4)
    assert pad == 3 and len(padded) == 8
    assert ids(padded) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert_rows_consistent(padded)
    assert [len(p) for p in padded.split(4)] == [2, 2, 2, 2]
    assert_batches_equal(padded.unpad(pad), b)


def test_pad_cycles_when_divisor_exceeds_length():
    padded, pad = make(2).pad_to_divisor(7)
    assert pad == 5 and ids(padded) == [0, 1, 0, 1, 0, 1, 0]


def test_pad_noop_and_errors():
    b = make(4)
    padded, pad = b.pad_to_divisor(2)
    assert pad == 0 and padded is not b
    assert_batches_equal(padded, b)
    assert b.unpad(0) is b
    with pytest.raises(ValueError, match="positive"):
        b.pad_to_divisor(0)
    with pytest.raises(ValueError, match=r"\[0, 4\].*got 5"):
        b.unpad(5)


# ------------------------------------------------------------------- shuffle
def test_shuffle_deterministic_permutation():
    b = make(8)
    s1 = b.shuffle(torch.Generator().manual_seed(0))
    s2 = b.shuffle(torch.Generator().manual_seed(0))
    assert ids(s1) == ids(s2)
    assert sorted(ids(s1)) == list(range(8))
    assert ids(s1) != list(range(8))
    assert_rows_consistent(s1)
    assert ids(b) == list(range(8))  # original untouched


# ------------------------------------------------------------- select / pop
def test_select():
    b = make(3, temperature=1.0, step=2)
    s = b.select(tensor_keys=["ids"], non_tensor_keys=["text"], meta_keys=["step"])
    assert list(s.tensors.keys()) == ["ids"] and list(s.non_tensors) == ["text"] and s.meta == {"step": 2}
    everything = b.select()
    assert_batches_equal(everything, b)
    only_t = b.select(tensor_keys=[])
    assert list(only_t.tensors.keys()) == [] and len(only_t) == 3 and set(only_t.non_tensors) == set(b.non_tensors)


def test_select_missing_key_lists_available():
    b = make(2)
    with pytest.raises(KeyError, match=r"'nope'.*'ids'.*'logp'"):
        b.select(tensor_keys=["nope"])
    with pytest.raises(KeyError, match=r"'nope'.*'text'"):
        b.select(non_tensor_keys=["nope"])
    with pytest.raises(KeyError, match=r"'nope'.*'temperature'"):
        b.select(meta_keys=["nope"])


def test_pop_removes_and_returns():
    b = make(3, temperature=1.0, step=2)
    out = b.pop(tensor_keys=["logp"], non_tensor_keys=["gt"], meta_keys=["step"])
    assert len(out) == 3
    assert list(out.tensors.keys()) == ["logp"] and list(out.non_tensors) == ["gt"] and out.meta == {"step": 2}
    assert "logp" not in b and "gt" not in b and "step" not in b.meta
    assert "ids" in b and "text" in b


def test_pop_missing_key_leaves_self_untouched():
    b = make(2)
    with pytest.raises(KeyError, match=r"'nope'.*available non-tensor keys.*'text'"):
        b.pop(tensor_keys=["logp"], non_tensor_keys=["nope"])
    assert "logp" in b


# --------------------------------------------------------------------- union
def test_union_in_place_with_equal_duplicates():
    b = make(3)
    other = Batch.from_dict(
        tensors={"ids": torch.arange(3), "adv": torch.ones(3)},
        non_tensors={"gt": [[0, 1], [1, 2], [2, 3]], "score": [0.1, 0.2, 0.3]},
        meta={"temperature": 1.0, "step": 4},
    )
    out = b.union(other)
    assert out is b
    assert "adv" in b and "score" in b and b.meta == {"temperature": 1.0, "step": 4}
    assert_rows_consistent(b)


def test_union_conflicts_name_the_key():
    b = make(2)
    with pytest.raises(ValueError, match="tensor key 'ids'"):
        b.union(Batch.from_dict(tensors={"ids": torch.tensor([5, 6])}))
    with pytest.raises(ValueError, match="non-tensor key 'info'"):
        b.union(Batch.from_dict(non_tensors={"info": [{"row": 0}, {"row": 9}]}))
    with pytest.raises(ValueError, match="meta key 'temperature'"):
        b.union(Batch.from_dict(tensors={"x": torch.zeros(2)}, meta={"temperature": 0.7}))
    assert "x" not in b  # a conflict leaves self untouched


def test_union_length_mismatch():
    with pytest.raises(ValueError, match="length 2 and 3"):
        make(2).union(make(3))


def test_union_treats_nan_tensors_as_equal():
    t = torch.tensor([float("nan"), 1.0])
    b = Batch.from_dict(tensors={"v": t})
    b.union(Batch.from_dict(tensors={"v": t.clone(), "w": torch.zeros(2)}))
    assert "w" in b


# -------------------------------------------------------------------- pickle
def test_pickle_round_trip_exact():
    b = make(4, temperature=0.9, tags=["a", "b"])
    b.tensors["mask"] = torch.tensor([True, False, True, True])
    back = pickle.loads(pickle.dumps(b))
    assert_batches_equal(back, b)
    assert back.tensors["mask"].dtype == torch.bool
    assert back.non_tensors["info"][3] == {"row": 3}
    assert_rows_consistent(back[[3, 1]])


# ---------------------------------------------------------------- compact
def big(n: int = 1024, width: int = 2048) -> Batch:
    """A 1024 x 2048 fp32 batch (8 MiB) with a per-row text column."""
    return Batch.from_dict(
        tensors={"x": torch.randn(n, width, generator=torch.Generator().manual_seed(0))},
        non_tensors={"text": [f"p{i}" for i in range(n)]},
        meta={"seed": 1},
    )


@pytest.mark.parametrize("dumps", [lambda o: pickle.dumps(o, protocol=5), cloudpickle.dumps], ids=["pickle5", "cloud"])
def test_compact_shard_serializes_its_rows_only(dumps):
    whole = big()
    view = whole.split(8)[1]
    assert len(dumps(view)) > len(dumps(whole)) * 0.9  # the problem: a view ships the batch's storage
    assert len(dumps(view.compact())) <= len(dumps(whole)) / 8 + 4096


def test_compact_equals_view_and_owns_its_storage():
    b = make(8)
    b.tensors["cols"] = torch.arange(8 * 6).reshape(8, 6)[:, ::2]  # a strided view, not row-major
    b.tensors["nested"] = TensorDict({"y": torch.arange(8.0)}, batch_size=[8])
    view = b.split(4)[2]
    c = view.compact()
    keys = list(view.tensors.keys(include_nested=True, leaves_only=True))
    assert keys == list(c.tensors.keys(include_nested=True, leaves_only=True)) and ("nested", "y") in keys
    wide = c.widened()
    for k in keys:
        assert torch.equal(wide.tensors[k], view.tensors[k]) and wide.tensors[k].dtype == view.tensors[k].dtype
        assert c.tensors[k].untyped_storage().nbytes() == c.tensors[k].numel() * c.tensors[k].element_size()
    assert len(c) == 2 and c.meta == view.meta
    assert_rows_consistent(c)
    c.tensors["ids"] += 100  # a copy: writing to it leaves the source alone
    assert ids(b) == list(range(8))


def test_compact_narrows_ids_and_masks_and_widened_restores_them():
    g = torch.Generator().manual_seed(0)
    b = Batch.from_dict(
        tensors={
            "input_ids": torch.randint(0, 151_936, (64, 512), generator=g),
            "attention_mask": torch.ones(64, 512, dtype=torch.long),
            "position_ids": torch.arange(512).expand(64, 512).contiguous(),
            "huge": torch.full((64, 1), 2**40),
            "logp": torch.randn(64, 512, generator=g),
            "flag": torch.ones(64, dtype=torch.bool),
        }
    )
    c = b.compact()
    dtypes = {k: c.tensors[k].dtype for k in ("input_ids", "attention_mask", "position_ids", "huge", "logp", "flag")}
    assert dtypes == {
        "input_ids": torch.int32,
        "attention_mask": torch.int8,
        "position_ids": torch.int16,
        "huge": torch.int64,
        "logp": torch.float32,
        "flag": torch.bool,
    }
    assert len(pickle.dumps(c, protocol=5)) < 0.5 * len(pickle.dumps(b, protocol=5))
    assert_batches_equal(c.widened(), b)


def test_compact_shares_what_is_already_compact():
    b = make(4)
    b.tensors["bias"] = torch.zeros(1, 6).expand(4, 6)  # stride 0: cheaper sent as it is than copied
    c = b.compact()
    assert c.tensors["logp"].data_ptr() == b.tensors["logp"].data_ptr()
    assert c.tensors["bias"].data_ptr() == b.tensors["bias"].data_ptr() and c.tensors["bias"].stride() == (0, 1)
    assert c.meta == b.meta and c.meta is not b.meta
