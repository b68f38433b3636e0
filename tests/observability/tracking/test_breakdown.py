import pytest

from hybridrl.observability.tracking.breakdown import TOP_LEVEL_EXCLUDED, format_breakdown, phase_breakdown


def as_dict(table):
    return {name: (seconds, share) for name, seconds, share in table}


def test_percentages_other_and_step():
    rows = [
        {"step": 1, "timing_s/gen": 9.0, "timing_s/update_actor": 9.0, "timing_s/step": 20.0},  # warm-up
        {
            "step": 2,
            "timing_s/gen": 2.0,
            "timing_s/update_actor": 1.0,
            "timing_s/step": 4.0,
            "timing_s/weight_sync": 0.5,
            "timing_s/generate_worker": 1.0,
        },
        {
            "step": 3,
            "timing_s/gen": 4.0,
            "timing_s/update_actor": 3.0,
            "timing_s/step": 8.0,
            "timing_s/weight_sync": 0.5,
            "timing_s/generate_worker": 1.0,
        },
    ]
    table = phase_breakdown(rows, skip_first=1)
    assert [name for name, _, _ in table] == ["gen", "update_actor", "other", "step"]
    got = as_dict(table)
    assert got["gen"] == pytest.approx((3.0, 50.0))
    assert got["update_actor"] == pytest.approx((2.0, 100 * 2 / 6))
    assert got["other"] == pytest.approx((1.0, 100 * 1 / 6))  # step 6 - phases 5; sub-phases not added
    assert got["step"] == pytest.approx((6.0, 100.0))
    # Without skipping, the warm-up step counts: gen (9 + 2 + 4) / 3 = 5 of step 32 / 3.
    assert as_dict(phase_breakdown(rows))["gen"] == pytest.approx((5.0, 100 * 5 / (32 / 3)))


def test_sub_phases_and_step_are_not_top_level():
    assert {"timing_s/step", "timing_s/weight_sync", "timing_s/generate_worker"} <= TOP_LEVEL_EXCLUDED
    rows = [{"timing_s/step": 1.0, "timing_s/weight_sync": 0.3, "timing_s/generate_worker": 0.3}]
    assert as_dict(phase_breakdown(rows)) == {"other": (1.0, 100.0), "step": (1.0, 100.0)}


def test_known_phases_in_step_order_then_unknown_alphabetically():
    row = {
        "timing_s/update_actor": 1.0,
        "timing_s/zz_validation": 1.0,
        "timing_s/checkpoint": 1.0,
        "timing_s/ref": 1.0,
        "timing_s/gen_max": 1.0,
        "timing_s/gen": 1.0,
        "timing_s/adv": 1.0,
        "timing_s/step": 8.0,
        "critic/score/mean": 0.5,
    }
    names = [name for name, _, _ in phase_breakdown([row])]
    assert names == ["gen", "gen_max", "ref", "adv", "update_actor", "checkpoint", "zz_validation", "other", "step"]
    assert as_dict(phase_breakdown([row]))["checkpoint"] == pytest.approx((1.0, 12.5))


def test_missing_phase_counts_as_zero_and_nulls_are_ignored():
    rows = [
        {"timing_s/gen": 2.0, "timing_s/values": 2.0, "timing_s/step": 4.0},
        {"timing_s/gen": 2.0, "timing_s/values": None, "timing_s/step": 4.0},
    ]
    got = as_dict(phase_breakdown(rows))
    assert got["values"] == pytest.approx((1.0, 25.0))
    assert got["other"] == pytest.approx((1.0, 25.0))


def test_skip_first_leaving_nothing_uses_every_row_and_empty_gives_nothing():
    rows = [{"timing_s/gen": 1.0, "timing_s/step": 2.0}]
    assert as_dict(phase_breakdown(rows, skip_first=1))["gen"] == pytest.approx((1.0, 50.0))
    assert phase_breakdown([], skip_first=1) == []
    assert "no steps" in format_breakdown([])


def test_without_step_time_the_step_is_the_sum_of_phases():
    got = as_dict(phase_breakdown([{"timing_s/gen": 1.0, "timing_s/reward": 3.0}]))
    assert got["step"] == (4.0, 100.0) and got["reward"] == pytest.approx((3.0, 75.0))
    assert got["other"] == pytest.approx((0.0, 0.0))


def test_format_breakdown_fixed_width_from_rows_or_table():
    rows = [
        {"timing_s/gen": 9.0, "timing_s/step": 9.0},
        {"timing_s/gen": 0.25, "timing_s/a_very_long_phase_name_here": 0.25, "timing_s/step": 1.0},
    ]
    text = format_breakdown(rows, skip_first=1)
    assert text == format_breakdown(phase_breakdown(rows, skip_first=1))
    lines = text.splitlines()
    assert lines[0].split() == ["phase", "seconds", "%", "of", "step"]
    data = [line for line in lines if not set(line) <= {"-"}][1:]
    assert [line.split()[0] for line in data] == ["gen", "a_very_long_phase_name_here", "other", "step"]
    assert len({len(line) for line in lines}) == 1, "columns are aligned"
    assert data[0].split()[1:] == ["0.250", "25.0%"]
    assert data[-1].split()[1:] == ["1.000", "100.0%"]
