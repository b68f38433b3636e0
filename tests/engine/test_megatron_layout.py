"""The Megatron rank grid, the pipeline's layer split and the fit checks (pure functions, one process)."""

from __future__ import annotations

import pytest

from hybridrl.engine.megatron.layout import MegatronLayout, megatron_fit_errors
from hybridrl.models.decoder_stage import stage_layer_ranges


def test_rank_grid_puts_tensor_parallel_ranks_next_to_each_other():
    # 8 ranks as pp=2 x dp=2 x tp=2: rank = (pp * dp_size + dp) * tp_size + tp
    coords = [(lay.pp_rank, lay.dp_rank, lay.tp_rank) for lay in (MegatronLayout(8, 2, 2, r) for r in range(8))]
    assert coords == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)]
    collectors = [r for r in range(8) if MegatronLayout(8, 2, 2, r).collects]
    assert collectors == [4, 6]  # tp rank 0 of the last stage, one per data-parallel replica
    assert MegatronLayout(8, 2, 2, 0).dp_size == 2


def test_layers_split_into_contiguous_balanced_stages():
    assert stage_layer_ranges(4, 2) == [range(0, 2), range(2, 4)]
    assert stage_layer_ranges(5, 2) == [range(0, 3), range(3, 5)]
    assert stage_layer_ranges(3, 3) == [range(0, 1), range(1, 2), range(2, 3)]
    with pytest.raises(ValueError, match="pp_size"):
        stage_layer_ranges(2, 3)


def fit(**kw):
    args = dict(workers=4, tp_size=2, pp_size=2, num_heads=4, num_kv_heads=2, num_layers=2)
    args.update(kw)
    return megatron_fit_errors("critic", **args)


def test_a_fitting_layout_has_no_errors():
    assert fit() == []
    assert fit(workers=8) == []  # dp = 2


def test_tp_must_divide_heads_and_kv_heads_and_the_message_names_them():
    (error,) = fit(tp_size=3, workers=6, pp_size=1)
    assert "tp_size=3" in error and "4 attention heads" in error and "2 key/value heads" in error
    assert fit(tp_size=4, pp_size=1)  # divides the 4 heads but not the 2 KV heads


def test_pp_cannot_exceed_layers():
    (error,) = fit(pp_size=4, tp_size=1, num_layers=2)
    assert "pp_size=4" in error and "2 layers" in error


def test_layout_must_fit_the_pool():
    (error,) = fit(workers=2)
    assert "2 x 2 = 4" in error and "2 workers" in error


def test_tied_embeddings_refuse_pipeline_stages():
    assert fit(tied_embeddings=True)
    assert fit(pp_size=1, tied_embeddings=True) == []
