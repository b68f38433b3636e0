"""DAPO dynamic-sampling group filter."""

import numpy as np
import pytest
import torch

from hybridrl.algorithms import groups_with_signal

NAN = float("nan")


def test_drops_all_equal_and_singleton_groups():
    # a: 1, 1 (all equal) ; b: 0, 1 (signal) ; c: 0.5, 0.5 (all equal) ; d: 3 alone
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, 0.5, 3.0])
    index = np.array(["a", "b", "a", "b", "c", "c", "d"], dtype=object)
    keep = groups_with_signal(scores, index)
    assert keep.dtype == np.bool_ and keep.shape == (7,)
    assert keep.tolist() == [False, True, False, True, False, False, False]


def test_int_ids_non_adjacent_groups_and_order():
    scores = torch.tensor([0.0, 2.0, 1.0, 2.0, 0.0, 5.0])
    index = np.array([30, 10, 30, 10, 20, 20])
    # 30: 0, 1 keep ; 10: 2, 2 drop ; 20: 0, 5 keep
    assert groups_with_signal(scores, index).tolist() == [True, False, True, False, True, True]


def test_identical_floats_are_dropped_exactly():
    # float64 std of three 0.1s is ~1.7e-17, not 0 (the mean rounds); equality is checked exactly
    scores = torch.tensor([0.1, 0.1, 0.1], dtype=torch.float64)
    assert torch.std(scores).item() > 0.0
    assert groups_with_signal(scores, np.array(["a"] * 3, dtype=object)).tolist() == [False] * 3


def test_nan_score_drops_its_group_and_numpy_input():
    scores = np.array([NAN, 1.0, 0.0, 1.0])
    index = np.array(["a", "a", "b", "b"], dtype=object)
    assert groups_with_signal(scores, index).tolist() == [False, False, True, True]


def test_all_kept_none_kept_and_empty():
    assert groups_with_signal(torch.tensor([0.0, 1.0]), np.array([0, 0])).all()
    assert not groups_with_signal(torch.tensor([1.0, 1.0]), np.array([0, 0])).any()
    assert groups_with_signal(torch.zeros(0), np.array([])).shape == (0,)


def test_bad_shapes_raise():
    with pytest.raises(ValueError):
        groups_with_signal(torch.zeros(2, 2), np.array([0, 0]))
    with pytest.raises(ValueError):
        groups_with_signal(torch.zeros(3), np.array([0, 0]))
