"""KL controllers and the in-reward KL penalty."""

import pytest
import torch

from hybridrl.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    make_kl_controller,
)

NAN = float("nan")


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_fixed_controller_never_changes():
    ctrl = FixedKLController(kl_coef=0.05)
    ctrl.update(current_kl=100.0, n_steps=1000)
    ctrl.update(current_kl=0.0, n_steps=1000)
    assert ctrl.value == 0.05


@pytest.mark.parametrize(
    "current_kl, expected",
    [
        # 9/6 - 1 = 0.5 -> clipped to 0.2 ; mult = 1 + 0.2 * 256 / 10000 = 1.00512
        (9.0, 0.1 * 1.00512),
        # 3/6 - 1 = -0.5 -> clipped to -0.2 ; mult = 1 - 0.00512
        (3.0, 0.1 * 0.99488),
        # 6.6/6 - 1 = 0.1 (inside the clip) ; mult = 1 + 0.1 * 256 / 10000 = 1.00256
        (6.6, 0.1 * 1.00256),
        # on target: unchanged
        (6.0, 0.1),
    ],
)
def test_adaptive_controller_step(current_kl, expected):
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctrl.update(current_kl=current_kl, n_steps=256)
    assert ctrl.value == pytest.approx(expected)


def test_adaptive_controller_raises_and_lowers_over_steps():
    ctrl = AdaptiveKLController(init_kl_coef=0.2, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=1.0, n_steps=10)  # error clipped to +0.2: x1.02
    ctrl.update(current_kl=1.0, n_steps=10)  # x1.02 again
    assert ctrl.value == pytest.approx(0.2 * 1.02 * 1.02)
    ctrl.update(current_kl=0.0, n_steps=50)  # error clipped to -0.2: x0.9
    assert ctrl.value == pytest.approx(0.2 * 1.02 * 1.02 * 0.9)


def test_controller_state_dict_roundtrip():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=6.0, horizon=10000)
    ctrl.update(current_kl=9.0, n_steps=256)
    restored = AdaptiveKLController(init_kl_coef=0.5, target_kl=6.0, horizon=10000)
    restored.load_state_dict(ctrl.state_dict())
    assert restored.value == ctrl.value
    fixed = FixedKLController(0.3)
    other = FixedKLController(0.0)
    other.load_state_dict(fixed.state_dict())
    assert other.value == 0.3


def test_make_kl_controller():
    fixed = make_kl_controller("fixed", kl_coef=0.01)
    assert isinstance(fixed, FixedKLController) and fixed.value == 0.01
    adaptive = make_kl_controller("adaptive", kl_coef=0.02, target_kl=6.0, horizon=10000)
    assert isinstance(adaptive, AdaptiveKLController)
    assert (adaptive.value, adaptive.target, adaptive.horizon) == (0.02, 6.0, 10000)
    with pytest.raises(ValueError):
        make_kl_controller("adaptive", kl_coef=0.02)
    with pytest.raises(ValueError, match="adaptive") as info:
        make_kl_controller("pid", kl_coef=0.02)
    assert "fixed" in str(info.value)


def test_adaptive_controller_rejects_bad_config():
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target_kl=0.0, horizon=100)
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target_kl=1.0, horizon=0)


# scores have padding 7.0 at (1, 2); log-probs have garbage there.
SCORES = [[0.0, 0.0, 1.0], [0.0, 2.0, 7.0]]
OLD_LP = [[-1.0, -1.0, -1.0], [-2.0, -2.0, NAN]]
REF_LP = [[-1.5, -1.0, -0.5], [-1.0, -2.0, 5.0]]
MASK = [[1, 1, 1], [1, 1, 0]]
# kl = lp - ref: row0 [0.5, 0, -0.5], row1 [-1, 0, (pad)]


def test_apply_kl_penalty_fixed():
    ctrl = FixedKLController(0.1)
    rewards, metrics = apply_kl_penalty(t(SCORES), t(OLD_LP), t(REF_LP), torch.tensor(MASK), ctrl, kind="kl")
    # rewards = scores - 0.1 * kl ; padding untouched
    expected = [[0.0 - 0.05, 0.0 - 0.0, 1.0 + 0.05], [0.0 + 0.1, 2.0 - 0.0, 7.0]]
    for got, exp in zip(rewards.tolist(), expected):
        assert got == pytest.approx(exp)
    # row means: (0.5 + 0 - 0.5)/3 = 0 ; (-1 + 0)/2 = -0.5 ; mean over rows = -0.25
    assert metrics == {
        "actor/reward_kl_penalty": pytest.approx(-0.25),
        "actor/reward_kl_penalty_coeff": 0.1,
    }
    assert all(type(v) is float for v in metrics.values())


def test_apply_kl_penalty_adaptive_updates_after_use():
    ctrl = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=10)
    _, metrics = apply_kl_penalty(t(SCORES), t(OLD_LP), t(REF_LP), torch.tensor(MASK), ctrl, kind="kl")
    # the coefficient used (and reported) is the one before the update
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    # current_kl = -0.25 ; -0.25/0.1 - 1 = -3.5 -> -0.2 ; n_steps = B = 2 ; mult = 1 - 0.2*2/10
    assert ctrl.value == pytest.approx(0.1 * 0.96)


def test_apply_kl_penalty_low_var_kl():
    ctrl = FixedKLController(1.0)
    lp = t([[0.0, 0.0], [0.0, NAN]])
    ref = t([[1.0, 0.0], [-1.0, 3.0]])
    m = torch.tensor([[1, 1], [1, 0]])
    rewards, metrics = apply_kl_penalty(torch.zeros(2, 2, dtype=torch.float64), lp, ref, m, ctrl, kind="low_var_kl")
    # k3 = e^x - x - 1 with x = ref - lp: x=1 -> e-2 ; x=0 -> 0 ; x=-1 -> e^-1
    e = 2.718281828459045
    assert rewards.tolist()[0] == pytest.approx([-(e - 2), 0.0])
    assert rewards.tolist()[1] == pytest.approx([-(1 / e), 0.0])
    # rows: (e-2 + 0)/2 ; e^-1 / 1
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(((e - 2) / 2 + 1 / e) / 2)


def test_apply_kl_penalty_unknown_kind():
    with pytest.raises(ValueError):
        apply_kl_penalty(t(SCORES), t(OLD_LP), t(REF_LP), torch.tensor(MASK), FixedKLController(0.1), kind="nope")
