"""Advantage estimators and masked statistics, checked against hand-worked values."""

import math

import numpy as np
import pytest
import torch

from hybridrl.algorithms import (
    ADV_ESTIMATORS,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    get_adv_estimator,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    register_adv_estimator,
)

NAN = float("nan")


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


# --------------------------------------------------------------------------- #
# masked statistics
# --------------------------------------------------------------------------- #

X = [[1.0, 2.0, 3.0], [4.0, 5.0, NAN]]
MASK = [[1, 1, 1], [1, 1, 0]]


def test_masked_sum_and_mean_ignore_padding_even_nan():
    x, m = t(X), torch.tensor(MASK)
    # 1+2+3+4+5 = 15 over 5 valid tokens.
    assert masked_sum(x, m).item() == 15.0
    assert masked_mean(x, m).item() == 3.0
    # per row: (1+2+3)=6, (4+5)=9; means 6/3=2, 9/2=4.5
    assert masked_sum(x, m, dim=-1).tolist() == [6.0, 9.0]
    assert masked_mean(x, m, dim=-1).tolist() == [2.0, 4.5]
    # per column: (1+4)/2, (2+5)/2, 3/1
    assert masked_mean(x, m, dim=0).tolist() == [2.5, 3.5, 3.0]


def test_masked_mean_of_empty_mask_is_zero_not_nan():
    x = t([[1.0, 2.0], [3.0, NAN]])
    m = torch.tensor([[1, 1], [0, 0]])
    assert masked_mean(x, m, dim=-1).tolist() == [1.5, 0.0]
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0


def test_masked_var_biased_and_unbiased():
    x, m = t(X), torch.tensor(MASK)
    # mean 3; squared deviations 4,1,0,1,4 -> 10
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(10 / 5)
    assert masked_var(x, m, unbiased=True).item() == pytest.approx(10 / 4)
    # a single valid token: variance 0 instead of 0/0
    single = masked_var(t([[7.0, NAN]]), torch.tensor([[1, 0]]))
    assert single.item() == 0.0


def test_masked_whiten():
    x, m = t(X), torch.tensor(MASK)
    out = masked_whiten(x, m)
    std = math.sqrt(2.5 + 1e-8)
    expected = [(v - 3.0) / std for v in [1.0, 2.0, 3.0, 4.0, 5.0]]
    valid = out[m.bool()].tolist()
    assert valid == pytest.approx(expected)
    # shift_mean=False keeps the mean: rescaled deviation + 3
    out2 = masked_whiten(x, m, shift_mean=False)
    assert out2[m.bool()].tolist() == pytest.approx([e + 3.0 for e in expected])


# --------------------------------------------------------------------------- #
# GAE
# --------------------------------------------------------------------------- #

GAMMA, LAM = 0.5, 0.5  # gamma * lam = 0.25
GAE_REWARDS = [[0.0, 0.0, 1.0], [0.0, 3.0, 7.0]]  # 7.0 is padding
GAE_VALUES = [[1.0, 2.0, 4.0], [1.0, 2.0, 100.0]]  # 100.0 is padding
GAE_MASK = [[1, 1, 1], [1, 1, 0]]

# Row 0 (bootstrap 0 after the last token):
#   t=2: delta = 1 + 0.5*0 - 4 = -3            gae = -3
#   t=1: delta = 0 + 0.5*4 - 2 = 0             gae = 0 + 0.25*(-3)    = -0.75
#   t=0: delta = 0 + 0.5*2 - 1 = 0             gae = 0 + 0.25*(-0.75) = -0.1875
# Row 1 (last valid token is t=1; padding value 100 must NOT be bootstrapped):
#   t=1: delta = 3 + 0.5*0 - 2 = 1             gae = 1
#   t=0: delta = 0 + 0.5*2 - 1 = 0             gae = 0 + 0.25*1 = 0.25
RAW_ADV = [[-0.1875, -0.75, -3.0], [0.25, 1.0]]
# returns = raw advantages + values (before whitening)
EXPECTED_RETURNS = [[-0.1875 + 1, -0.75 + 2, -3.0 + 4], [0.25 + 1, 1.0 + 2, 0.0]]


def _whitened_expected():
    flat = RAW_ADV[0] + RAW_ADV[1]
    mean = (-0.1875 - 0.75 - 3.0 + 0.25 + 1.0) / 5  # = -0.5375
    # deviations 0.35, -0.2125, -2.4625, 0.7875, 1.5375 ; squares sum 9.215625
    var = (0.35**2 + 0.2125**2 + 2.4625**2 + 0.7875**2 + 1.5375**2) / 4  # unbiased
    assert var == pytest.approx(9.215625 / 4)
    std = math.sqrt(var + 1e-8)
    w = [(a - mean) / std for a in flat]
    return [w[0:3], w[3:5] + [0.0]]


def test_gae_matches_hand_computation():
    adv, ret = compute_gae_advantage_return(
        t(GAE_REWARDS), t(GAE_VALUES), torch.tensor(GAE_MASK), gamma=GAMMA, lam=LAM
    )
    assert ret.tolist()[0] == pytest.approx(EXPECTED_RETURNS[0])
    assert ret.tolist()[1] == pytest.approx(EXPECTED_RETURNS[1])
    expected = _whitened_expected()
    assert adv.tolist()[0] == pytest.approx(expected[0])
    assert adv.tolist()[1] == pytest.approx(expected[1])
    # padding is exactly zero
    assert adv[1, 2].item() == 0.0 and ret[1, 2].item() == 0.0


def test_gae_padding_never_leaks():
    base_adv, base_ret = compute_gae_advantage_return(
        t(GAE_REWARDS), t(GAE_VALUES), torch.tensor(GAE_MASK), gamma=GAMMA, lam=LAM
    )
    for pad_r, pad_v in [(0.0, 0.0), (-50.0, 1e6), (NAN, NAN), (float("inf"), float("-inf"))]:
        r, v = t(GAE_REWARDS), t(GAE_VALUES)
        r[1, 2], v[1, 2] = pad_r, pad_v
        adv, ret = compute_gae_advantage_return(r, v, torch.tensor(GAE_MASK), GAMMA, LAM)
        assert torch.equal(adv, base_adv)
        assert torch.equal(ret, base_ret)


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    # gamma = lam = 1, values 0 -> raw advantage = sum of future rewards.
    r = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    v = torch.zeros(2, 3, dtype=torch.float64)
    m = torch.tensor([[1, 1, 1], [1, 1, 0]])
    _, ret = compute_gae_advantage_return(r, v, m, gamma=1.0, lam=1.0)
    # row0: 1+2+3, 2+3, 3 ; row1: 4+5, 5, pad
    assert ret.tolist() == [[6.0, 5.0, 3.0], [9.0, 5.0, 0.0]]


def test_gae_does_not_track_grad():
    v = t(GAE_VALUES).requires_grad_(True)
    adv, ret = compute_gae_advantage_return(t(GAE_REWARDS), v, torch.tensor(GAE_MASK), GAMMA, LAM)
    assert not adv.requires_grad and not ret.requires_grad


# --------------------------------------------------------------------------- #
# GRPO
# --------------------------------------------------------------------------- #

GRPO_REWARDS = [
    [0.0, 0.0, 1.0],  # group a, score 1
    [0.0, 0.5, 9.0],  # group a, score 0.5 (9.0 is padding)
    [0.0, 9.0, 9.0],  # group a, score 0   (9.0 are padding)
    [0.0, 0.0, 2.0],  # group b (alone), score 2
]
GRPO_MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]]
GRPO_INDEX = np.array(["a", "a", "a", "b"], dtype=object)


def test_grpo_matches_hand_computation():
    adv, ret = compute_grpo_outcome_advantage(
        t(GRPO_REWARDS), torch.tensor(GRPO_MASK), GRPO_INDEX, epsilon=1e-6
    )
    # group a: scores 1, 0.5, 0 -> mean 0.5, unbiased std sqrt((0.25+0+0.25)/2) = 0.5
    a0 = (1.0 - 0.5) / (0.5 + 1e-6)
    a1 = (0.5 - 0.5) / (0.5 + 1e-6)
    a2 = (0.0 - 0.5) / (0.5 + 1e-6)
    # group b has one member: mean 0, std 1
    b0 = (2.0 - 0.0) / (1.0 + 1e-6)
    expected = [[a0, a0, a0], [a1, a1, 0.0], [a2, 0.0, 0.0], [b0, b0, b0]]
    for got, exp in zip(adv.tolist(), expected):
        assert got == pytest.approx(exp)
    assert torch.equal(ret, adv)


def test_grpo_without_std_normalisation():
    adv, _ = compute_grpo_outcome_advantage(
        t(GRPO_REWARDS), torch.tensor(GRPO_MASK), GRPO_INDEX, norm_adv_by_std_in_grpo=False
    )
    # score - group mean: 1-0.5, 0.5-0.5, 0-0.5 ; single group: 2-0
    assert adv.tolist() == [[0.5, 0.5, 0.5], [0.0, 0.0, 0.0], [-0.5, 0.0, 0.0], [2.0, 2.0, 2.0]]


def test_grpo_groups_need_not_be_contiguous_and_ids_can_be_ints():
    r = t([[1.0], [5.0], [3.0], [7.0]])
    m = torch.ones(4, 1)
    # group 10: rows 0, 2 (scores 1, 3) ; group 20: rows 1, 3 (scores 5, 7)
    adv, _ = compute_grpo_outcome_advantage(r, m, np.array([10, 20, 10, 20]), epsilon=0.0)
    # each group: mean in the middle, unbiased std sqrt((1+1)/1) = sqrt(2)
    s = math.sqrt(2.0)
    assert adv.squeeze(-1).tolist() == pytest.approx([-1 / s, -1 / s, 1 / s, 1 / s])


def test_grpo_padding_never_leaks():
    base, _ = compute_grpo_outcome_advantage(t(GRPO_REWARDS), torch.tensor(GRPO_MASK), GRPO_INDEX)
    r = t(GRPO_REWARDS)
    r[1, 2], r[2, 1], r[2, 2] = NAN, float("inf"), -1e9
    adv, _ = compute_grpo_outcome_advantage(r, torch.tensor(GRPO_MASK), GRPO_INDEX)
    assert torch.equal(adv, base)


def test_grpo_index_length_mismatch_raises():
    with pytest.raises(ValueError):
        compute_grpo_outcome_advantage(t(GRPO_REWARDS), torch.tensor(GRPO_MASK), np.array(["a"]))


# --------------------------------------------------------------------------- #
# registry
# --------------------------------------------------------------------------- #


def test_registry_entries_and_needs_critic():
    assert {"gae", "grpo"} <= set(ADV_ESTIMATORS)
    assert get_adv_estimator("gae").needs_critic is True
    assert get_adv_estimator("grpo").needs_critic is False
    assert ADV_ESTIMATORS["gae"].needs_critic is True


def test_registry_uniform_signature():
    r, m = t(GAE_REWARDS), torch.tensor(GAE_MASK)
    common = dict(values=t(GAE_VALUES), index=np.array([0, 1]), gamma=GAMMA, lam=LAM,
                  norm_adv_by_std_in_grpo=True, eps=1e-6)
    adv, ret = get_adv_estimator("gae")(r, m, **common)
    direct_adv, direct_ret = compute_gae_advantage_return(r, t(GAE_VALUES), m, GAMMA, LAM)
    assert torch.equal(adv, direct_adv) and torch.equal(ret, direct_ret)

    adv, ret = get_adv_estimator("grpo")(r, m, **common)
    # two singleton groups: advantage = score / (1 + eps); scores 0+0+1 = 1 and 0+3 = 3
    assert adv[0].tolist() == pytest.approx([1 / (1 + 1e-6)] * 3)
    assert adv[1].tolist() == pytest.approx([3 / (1 + 1e-6)] * 2 + [0.0])


def test_gae_estimator_without_values_raises():
    with pytest.raises(ValueError, match="values"):
        get_adv_estimator("gae")(t(GAE_REWARDS), torch.tensor(GAE_MASK))


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match="gae") as info:
        get_adv_estimator("nope")
    assert "grpo" in str(info.value) and "nope" in str(info.value)


def test_register_new_and_duplicate():
    name = "_test_only_estimator"
    try:

        @register_adv_estimator(name, needs_critic=False)
        def _fn(token_level_rewards, response_mask, **kwargs):
            return token_level_rewards, token_level_rewards

        assert get_adv_estimator(name).needs_critic is False
        with pytest.raises(ValueError):
            register_adv_estimator(name)(_fn)
    finally:
        ADV_ESTIMATORS.pop(name, None)
