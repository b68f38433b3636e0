"""Advantage estimators and masked statistics, checked against hand-worked values."""

import math

import numpy as np
import pytest
import torch

from hybridrl.algorithms import (
    ADV_ESTIMATORS,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
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
    adv, ret = compute_gae_advantage_return(t(GAE_REWARDS), t(GAE_VALUES), torch.tensor(GAE_MASK), gamma=GAMMA, lam=LAM)
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
    adv, ret = compute_grpo_outcome_advantage(t(GRPO_REWARDS), torch.tensor(GRPO_MASK), GRPO_INDEX, epsilon=1e-6)
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
    common = dict(
        values=t(GAE_VALUES), index=np.array([0, 1]), gamma=GAMMA, lam=LAM, norm_adv_by_std_in_grpo=True, eps=1e-6
    )
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


# --------------------------------------------------------------------------- #
# critic-free estimators: rloo, reinforce++, reinforce++-baseline, remax
# --------------------------------------------------------------------------- #

# B=4 in 2 groups that are not adjacent (string ids), T=3, row 1 padded at t=2.
OUT_REWARDS = [
    [0.0, 0.0, 1.0],  # group "p", score 1
    [0.0, 2.0, 0.0],  # group "q", score 2 (t=2 is padding)
    [0.0, 0.0, 3.0],  # group "p", score 3
    [1.0, 1.0, 2.0],  # group "q", score 4
]
OUT_MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
OUT_INDEX = np.array(["p", "q", "p", "q"], dtype=object)
OUT_BASELINES = [0.5, 1.0, 2.0, 10.0]


def _bcast(per_row, mask=OUT_MASK):
    """Hand-broadcast one value per row to its valid tokens, 0 at padding."""
    return [[v if m else 0.0 for m in row_mask] for v, row_mask in zip(per_row, mask)]


def _assert_rows(got, expected):
    for g, e in zip(got.tolist(), expected):
        assert g == pytest.approx(e)


def test_rloo_matches_hand_computation():
    adv, ret = compute_rloo_outcome_advantage(t(OUT_REWARDS), torch.tensor(OUT_MASK), OUT_INDEX)
    # group p (rows 0, 2): 1 - 3 = -2 ; 3 - 1 = 2 ; group q (rows 1, 3): 2 - 4 = -2 ; 4 - 2 = 2
    _assert_rows(adv, _bcast([-2.0, -2.0, 2.0, 2.0]))
    assert adv[1, 2].item() == 0.0
    assert torch.equal(ret, adv)


def test_rloo_leave_one_out_mean_and_singleton_group():
    r = t([[1.0], [5.0], [4.0], [2.0], [7.0], [9.0]])
    m = torch.ones(6, 1)
    index = np.array(["a", "b", "a", "b", "a", "c"], dtype=object)
    adv, _ = compute_rloo_outcome_advantage(r, m, index)
    # a = rows 0, 2, 4 with scores 1, 4, 7:
    #   row0: 1 - (4 + 7)/2 = -4.5 ; row2: 4 - (1 + 7)/2 = 0 ; row4: 7 - (1 + 4)/2 = 4.5
    #   (= 3/2 * (s - 4): -4.5, 0, 4.5)
    # b = rows 1, 3 with scores 5, 2: 5 - 2 = 3 ; 2 - 5 = -3
    # c = row 5 alone: no baseline, advantage 0
    assert adv.squeeze(-1).tolist() == pytest.approx([-4.5, 3.0, 0.0, -3.0, 4.5, 0.0])


def test_rloo_int_ids_and_tensor_index():
    r, m = t(OUT_REWARDS), torch.tensor(OUT_MASK)
    base, _ = compute_rloo_outcome_advantage(r, m, OUT_INDEX)
    for index in (np.array([7, 3, 7, 3]), torch.tensor([7, 3, 7, 3])):
        adv, _ = compute_rloo_outcome_advantage(r, m, index)
        assert torch.equal(adv, base)


# REINFORCE++ with gamma = 0.5, G_t = r_t + 0.5 * G_{t+1}:
#   row0 [0, 0, 1]: G2 = 1, G1 = 0.5, G0 = 0.25
#   row1 [0, 2, pad]: G1 = 2, G0 = 1
#   row2 [0, 0, 3]: G2 = 3, G1 = 1.5, G0 = 0.75
#   row3 [1, 1, 2]: G2 = 2, G1 = 1 + 1 = 2, G0 = 1 + 1 = 2
RPP_RETURNS = [[0.25, 0.5, 1.0], [1.0, 2.0, 0.0], [0.75, 1.5, 3.0], [2.0, 2.0, 2.0]]


def test_reinforce_plus_plus_matches_hand_computation():
    adv, ret = compute_reinforce_plus_plus_outcome_advantage(t(OUT_REWARDS), torch.tensor(OUT_MASK), gamma=0.5)
    _assert_rows(ret, RPP_RETURNS)
    # whitening over the 11 valid returns
    flat = [0.25, 0.5, 1.0, 1.0, 2.0, 0.75, 1.5, 3.0, 2.0, 2.0, 2.0]
    mean = 16.0 / 11  # 1.75 + 3 + 5.25 + 6 = 16
    assert sum(flat) / 11 == pytest.approx(mean)
    var = sum((g - mean) ** 2 for g in flat) / 10  # unbiased
    std = math.sqrt(var + 1e-8)
    expected = [[(g - mean) / std if m else 0.0 for g, m in zip(row, mrow)] for row, mrow in zip(RPP_RETURNS, OUT_MASK)]
    _assert_rows(adv, expected)
    assert adv[1, 2].item() == 0.0 and ret[1, 2].item() == 0.0


def test_reinforce_plus_plus_padding_is_passed_through_not_reset():
    # padding in the middle: its reward is ignored and the running return crosses it
    r = t([[1.0, 100.0, 2.0]])
    m = torch.tensor([[1, 0, 1]])
    _, ret = compute_reinforce_plus_plus_outcome_advantage(r, m, gamma=0.5)
    # G2 = 2 ; t=1 padding emits 0 and keeps 2 ; G0 = 1 + 0.5 * 2 = 2
    assert ret.tolist() == [[2.0, 0.0, 2.0]]


def test_reinforce_plus_plus_baseline_matches_hand_computation():
    adv, ret = compute_reinforce_plus_plus_baseline_outcome_advantage(t(OUT_REWARDS), torch.tensor(OUT_MASK), OUT_INDEX)
    # group p: scores 1, 3, mean 2 -> -1, +1 ; group q: scores 2, 4, mean 3 -> -1, +1
    # broadcast: -1 on 5 valid tokens (rows 0, 1), +1 on 6 (rows 2, 3)
    # mean = (-5 + 6) / 11 = 1/11 ; deviations -12/11 (x5), 10/11 (x6)
    # sum of squares = (5*144 + 6*100) / 121 = 120/11 ; unbiased var = 12/11
    std = math.sqrt(12 / 11 + 1e-8)
    lo, hi = (-12 / 11) / std, (10 / 11) / std
    _assert_rows(adv, _bcast([lo, lo, hi, hi]))
    assert adv[1, 2].item() == 0.0
    assert torch.equal(ret, adv)


def test_reinforce_plus_plus_baseline_singleton_group_is_zero_before_whitening():
    r = t([[1.0], [3.0], [5.0]])
    adv, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(
        r, torch.ones(3, 1), np.array(["a", "a", "b"], dtype=object)
    )
    # centred: -1, +1, 0 (b is alone) ; mean 0, unbiased var (1 + 1 + 0)/2 = 1
    assert adv.squeeze(-1).tolist() == pytest.approx([-1.0, 1.0, 0.0])


def test_remax_matches_hand_computation():
    adv, ret = compute_remax_outcome_advantage(t(OUT_REWARDS), t(OUT_BASELINES), torch.tensor(OUT_MASK))
    # reward-to-go (gamma = 1): row0 1,1,1 ; row1 2,2,pad ; row2 3,3,3 ; row3 4,3,2
    _assert_rows(ret, [[1.0, 1.0, 1.0], [2.0, 2.0, 0.0], [3.0, 3.0, 3.0], [4.0, 3.0, 2.0]])
    # minus the row's greedy baseline 0.5, 1, 2, 10 ; no whitening
    _assert_rows(adv, [[0.5, 0.5, 0.5], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [-6.0, -7.0, -8.0]])


def test_remax_without_baselines_raises():
    with pytest.raises(ValueError, match="reward_baselines"):
        get_adv_estimator("remax")(t(OUT_REWARDS), torch.tensor(OUT_MASK), index=OUT_INDEX)


def test_remax_baseline_shape_checked():
    with pytest.raises(ValueError, match="reward_baselines"):
        compute_remax_outcome_advantage(t(OUT_REWARDS), t([[1.0]] * 4), torch.tensor(OUT_MASK))


@pytest.mark.parametrize("name", ["rloo", "reinforce_plus_plus_baseline"])
def test_group_estimators_need_index(name):
    with pytest.raises(ValueError, match="index"):
        get_adv_estimator(name)(t(OUT_REWARDS), torch.tensor(OUT_MASK))


NEW_ESTIMATORS = ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"]


def _call(name, rewards):
    return get_adv_estimator(name)(
        rewards,
        torch.tensor(OUT_MASK),
        values=None,
        index=OUT_INDEX,
        gamma=0.5,
        lam=0.9,
        norm_adv_by_std_in_grpo=True,
        eps=1e-6,
        reward_baselines=t(OUT_BASELINES),
    )


@pytest.mark.parametrize("name", NEW_ESTIMATORS)
@pytest.mark.parametrize("pad", [NAN, float("inf"), float("-inf"), 1e9])
def test_new_estimators_padding_never_leaks(name, pad):
    base_adv, base_ret = _call(name, t(OUT_REWARDS))
    r = t(OUT_REWARDS)
    r[1, 2] = pad
    adv, ret = _call(name, r)
    assert torch.equal(adv, base_adv) and torch.equal(ret, base_ret)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


def test_registry_adapters_match_direct_calls():
    r, m = t(OUT_REWARDS), torch.tensor(OUT_MASK)
    pairs = {
        "rloo": compute_rloo_outcome_advantage(r, m, OUT_INDEX),
        "reinforce_plus_plus": compute_reinforce_plus_plus_outcome_advantage(r, m, 0.5),
        "reinforce_plus_plus_baseline": compute_reinforce_plus_plus_baseline_outcome_advantage(r, m, OUT_INDEX),
        "remax": compute_remax_outcome_advantage(r, t(OUT_BASELINES), m),
    }
    for name, (direct_adv, direct_ret) in pairs.items():
        adv, ret = _call(name, r)
        assert torch.equal(adv, direct_adv) and torch.equal(ret, direct_ret), name
    # gae and grpo accept (and ignore) reward_baselines
    common = dict(values=t(OUT_REWARDS), index=OUT_INDEX, reward_baselines=t(OUT_BASELINES))
    for name in ("gae", "grpo"):
        get_adv_estimator(name)(r, m, **common)


def test_registry_flags():
    expected = {
        # name: (needs_critic, needs_groups, needs_greedy_baseline)
        "gae": (True, False, False),
        "grpo": (False, True, False),
        "rloo": (False, True, False),
        "reinforce_plus_plus": (False, False, False),
        "reinforce_plus_plus_baseline": (False, True, False),
        "remax": (False, False, True),
    }
    for name, flags in expected.items():
        e = get_adv_estimator(name)
        assert (e.needs_critic, e.needs_groups, e.needs_greedy_baseline) == flags, name


def test_register_with_new_flags():
    name = "_test_only_flags"
    try:

        @register_adv_estimator(name, needs_groups=True, needs_greedy_baseline=True)
        def _fn(token_level_rewards, response_mask, **kwargs):
            return token_level_rewards, token_level_rewards

        e = get_adv_estimator(name)
        assert (e.needs_critic, e.needs_groups, e.needs_greedy_baseline) == (False, True, True)
    finally:
        ADV_ESTIMATORS.pop(name, None)


@pytest.mark.parametrize("name", NEW_ESTIMATORS)
def test_new_estimators_do_not_track_grad(name):
    r = t(OUT_REWARDS).requires_grad_(True)
    adv, ret = _call(name, r)
    assert not adv.requires_grad and not ret.requires_grad
