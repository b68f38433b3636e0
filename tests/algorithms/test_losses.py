"""PPO losses, loss aggregation, per-token log-probs / entropy and KL estimators."""

import math

import pytest
import torch

from hybridrl.algorithms import (
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    kl_penalty,
    log_probs_from_logits,
)

NAN = float("nan")


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


# --------------------------------------------------------------------------- #
# agg_loss
# --------------------------------------------------------------------------- #

LOSS = [[1.0, 2.0, 3.0], [4.0, 5.0, NAN], [7.0, 7.0, 7.0]]  # row 2 is all padding
LOSS_MASK = [[1, 1, 1], [1, 1, 0], [0, 0, 0]]


@pytest.mark.parametrize(
    "mode, expected",
    [
        # (1+2+3+4+5) / 5 tokens
        ("token-mean", 15 / 5),
        # row sums 6, 9 ; mean over the 2 non-empty rows
        ("seq-mean-token-sum", (6 + 9) / 2),
        # row means 6/3=2, 9/2=4.5 ; mean over non-empty rows
        ("seq-mean-token-mean", (2 + 4.5) / 2),
        # row sums divided by T=3, mean over non-empty rows
        ("seq-mean-token-sum-norm", (6 / 3 + 9 / 3) / 2),
    ],
)
def test_agg_loss_modes(mode, expected):
    out = agg_loss(t(LOSS), torch.tensor(LOSS_MASK), mode)
    assert out.dim() == 0
    assert out.item() == pytest.approx(expected)


def test_agg_loss_sum_norm_with_explicit_scale():
    out = agg_loss(t(LOSS), torch.tensor(LOSS_MASK), "seq-mean-token-sum-norm", loss_scale_factor=5)
    assert out.item() == pytest.approx((6 / 5 + 9 / 5) / 2)


def test_agg_loss_unknown_mode():
    with pytest.raises(ValueError, match="token-mean"):
        agg_loss(t(LOSS), torch.tensor(LOSS_MASK), "token-sum")


# --------------------------------------------------------------------------- #
# policy loss
# --------------------------------------------------------------------------- #

OLD_LP = [[-1.0, -1.0, -1.0], [-1.0, -1.0, 1000.0]]  # 1000 is padding garbage
RATIOS = [[1.5, 0.5, 1.1], [0.7, 3.0]]
ADV = [[1.0, -1.0, 2.0], [1.0, -2.0, NAN]]  # NaN is padding garbage
PG_MASK = [[1, 1, 1], [1, 1, 0]]


def _policy_inputs():
    log_prob = torch.tensor(
        [
            [-1.0 + math.log(r) for r in RATIOS[0]],
            [-1.0 + math.log(r) for r in RATIOS[1]] + [NAN],  # NaN padding
        ],
        dtype=torch.float64,
        requires_grad=True,
    )
    return t(OLD_LP), log_prob, t(ADV), torch.tensor(PG_MASK)


# Per token, clip range [0.8, 1.2]:   l1 = -A*r, l2 = -A*clip(r)   max   clipped?
#   (0,0) r=1.5 A= 1:  l1=-1.5  l2=-1.2                             -1.2  yes
#   (0,1) r=0.5 A=-1:  l1= 0.5  l2= 0.8                              0.8  yes
#   (0,2) r=1.1 A= 2:  l1=-2.2  l2=-2.2                             -2.2  no
#   (1,0) r=0.7 A= 1:  l1=-0.7  l2=-0.8                             -0.7  no
#   (1,1) r=3.0 A=-2:  l1= 6.0  l2= 2.4                              6.0  no
PG_TOKEN_LOSSES = [[-1.2, 0.8, -2.2], [-0.7, 6.0]]


def test_policy_loss_token_mean():
    old, lp, adv, m = _policy_inputs()
    out = compute_policy_loss(old, lp, adv, m, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert set(out) == {"pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}
    assert out["pg_loss"].item() == pytest.approx((-1.2 + 0.8 - 2.2 - 0.7 + 6.0) / 5)  # 0.54
    assert out["pg_clipfrac"].item() == pytest.approx(2 / 5)
    assert out["pg_clipfrac_lower"].item() == 0.0
    # ppo_kl = mean(old - new) = -mean(log r)
    expected_kl = -(math.log(1.5) + math.log(0.5) + math.log(1.1) + math.log(0.7) + math.log(3.0)) / 5
    assert out["ppo_kl"].item() == pytest.approx(expected_kl)
    assert out["pg_loss"].requires_grad
    assert not out["pg_clipfrac"].requires_grad and not out["ppo_kl"].requires_grad


def test_policy_loss_gradient_and_padding():
    old, lp, adv, m = _policy_inputs()
    out = compute_policy_loss(old, lp, adv, m)
    out["pg_loss"].backward()
    # d/dlp of -A*r/5 is -A*r/5 where unclipped, 0 where the clipped branch is active:
    #   (0,2): -2*1.1/5 = -0.44 ; (1,0): -1*0.7/5 = -0.14 ; (1,1): 2*3/5 = 1.2 ; padding 0
    expected = [[0.0, 0.0, -0.44], [-0.14, 1.2, 0.0]]
    assert torch.isfinite(lp.grad).all()
    for got, exp in zip(lp.grad.tolist(), expected):
        assert got == pytest.approx(exp)


def test_policy_loss_clip_higher():
    old, lp, adv, m = _policy_inputs()
    out = compute_policy_loss(old, lp, adv, m, clip_ratio_low=0.2, clip_ratio_high=0.6)
    # range [0.8, 1.6]: token (0,0) r=1.5 is no longer clipped -> -1.5; only (0,1) clipped
    assert out["pg_loss"].item() == pytest.approx((-1.5 + 0.8 - 2.2 - 0.7 + 6.0) / 5)  # 0.48
    assert out["pg_clipfrac"].item() == pytest.approx(1 / 5)


def test_policy_loss_dual_clip():
    old, lp, adv, m = _policy_inputs()
    out = compute_policy_loss(old, lp, adv, m, clip_ratio_c=2.5)
    # A<0 tokens capped at -A*2.5:  (0,1): min(0.8, 2.5) = 0.8 ; (1,1): min(6.0, 5.0) = 5.0 (capped)
    assert out["pg_loss"].item() == pytest.approx((-1.2 + 0.8 - 2.2 - 0.7 + 5.0) / 5)  # 0.34
    assert out["pg_clipfrac_lower"].item() == pytest.approx(1 / 5)
    assert out["pg_clipfrac"].item() == pytest.approx(2 / 5)
    # positive-advantage tokens are never capped, even with a tiny c
    out_pos = compute_policy_loss(t([[-1.0]]), t([[-1.0 + math.log(5.0)]]), t([[1.0]]),
                                  torch.ones(1, 1), clip_ratio_c=1.5)
    assert out_pos["pg_loss"].item() == pytest.approx(-1.2)
    assert out_pos["pg_clipfrac_lower"].item() == 0.0


def test_policy_loss_dual_clip_needs_c_above_one():
    old, lp, adv, m = _policy_inputs()
    with pytest.raises(ValueError):
        compute_policy_loss(old, lp, adv, m, clip_ratio_c=1.0)


def test_policy_loss_seq_mean_token_mean():
    old, lp, adv, m = _policy_inputs()
    out = compute_policy_loss(old, lp, adv, m, loss_agg_mode="seq-mean-token-mean")
    row0 = (-1.2 + 0.8 - 2.2) / 3
    row1 = (-0.7 + 6.0) / 2
    assert out["pg_loss"].item() == pytest.approx((row0 + row1) / 2)


def test_policy_loss_log_ratio_is_clamped():
    # log-ratio 50 would give exp(50); it is clamped to 20 -> loss = -A * e^20 with A = -1
    out = compute_policy_loss(t([[0.0]]), t([[50.0]]), t([[-1.0]]), torch.ones(1, 1))
    assert torch.isfinite(out["pg_loss"])
    assert out["pg_loss"].item() == pytest.approx(math.exp(20.0))
    assert out["ppo_kl"].item() == pytest.approx(-20.0)
    # float32 at a log-ratio of 200 would overflow to inf without the clamp
    out32 = compute_policy_loss(
        torch.zeros(1, 1), torch.full((1, 1), 200.0), -torch.ones(1, 1), torch.ones(1, 1)
    )
    assert torch.isfinite(out32["pg_loss"])


def test_policy_loss_padding_garbage_does_not_change_result():
    old, lp, adv, m = _policy_inputs()
    base = compute_policy_loss(old, lp, adv, m, clip_ratio_c=2.5)
    old2, adv2 = old.clone(), adv.clone()
    old2[1, 2], adv2[1, 2] = -1e9, 1e9
    lp2 = lp.detach().clone()
    lp2[1, 2] = float("inf")
    other = compute_policy_loss(old2, lp2, adv2, m, clip_ratio_c=2.5)
    for k in base:
        assert torch.equal(base[k].detach(), other[k].detach()), k


# --------------------------------------------------------------------------- #
# value loss
# --------------------------------------------------------------------------- #

# tokens (values, vpred, return), cliprange 0.5 -> vpred clipped to [V-0.5, V+0.5]
#   a: V=1, v=2,   R=2 : clipped 1.5 ; l1 = 0      l2 = 0.25  -> 0.25 (clipped)
#   b: V=1, v=1.2, R=0 : clipped 1.2 ; l1 = 1.44   l2 = 1.44  -> 1.44
#   c: V=0, v=-1,  R=0 : clipped -0.5; l1 = 1      l2 = 0.25  -> 1
#   d: V=0, v=0.5, R=3 : clipped 0.5 ; l1 = 6.25   l2 = 6.25  -> 6.25
VALUES = [[1.0, 1.0, 0.0], [0.0, NAN, NAN]]
VPREDS = [[2.0, 1.2, -1.0], [0.5, NAN, 5.0]]
RETURNS = [[2.0, 0.0, 0.0], [3.0, NAN, -7.0]]
V_MASK = [[1, 1, 1], [1, 0, 0]]


def test_value_loss_clipped():
    vp = t(VPREDS).requires_grad_(True)
    out = compute_value_loss(vp, t(RETURNS), t(VALUES), torch.tensor(V_MASK), cliprange_value=0.5)
    assert set(out) == {"vf_loss", "vf_clipfrac"}
    assert out["vf_loss"].item() == pytest.approx(0.5 * (0.25 + 1.44 + 1 + 6.25) / 4)  # 1.1175
    assert out["vf_clipfrac"].item() == pytest.approx(1 / 4)
    out["vf_loss"].backward()
    # d/dv of 0.5*(v-R)^2/4 = (v-R)/4 where the unclipped term wins; 0 on the clipped token a
    #   b: 1.2/4 = 0.3 ; c: -1/4 = -0.25 ; d: (0.5-3)/4 = -0.625 ; padding 0
    expected = [[0.0, 0.3, -0.25], [-0.625, 0.0, 0.0]]
    assert torch.isfinite(vp.grad).all()
    for got, exp in zip(vp.grad.tolist(), expected):
        assert got == pytest.approx(exp)


def test_value_loss_unclipped():
    out = compute_value_loss(t(VPREDS), t(RETURNS), t(VALUES), torch.tensor(V_MASK), None)
    assert out["vf_loss"].item() == pytest.approx(0.5 * (0 + 1.44 + 1 + 6.25) / 4)  # 1.08625
    assert out["vf_clipfrac"].item() == 0.0


def test_value_loss_agg_mode():
    out = compute_value_loss(
        t(VPREDS), t(RETURNS), t(VALUES), torch.tensor(V_MASK), 0.5, loss_agg_mode="seq-mean-token-sum"
    )
    # row sums: 0.25+1.44+1 = 2.69 ; 6.25 ; mean over 2 rows, times 0.5
    assert out["vf_loss"].item() == pytest.approx(0.5 * (2.69 + 6.25) / 2)


# --------------------------------------------------------------------------- #
# entropy / log-probs from logits
# --------------------------------------------------------------------------- #


def test_entropy_from_logits():
    ln2 = math.log(2.0)
    logits = t(
        [
            [
                [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4
                [ln2, 0.0, 0.0, float("-inf")],  # p = 1/2, 1/4, 1/4, 0: 1.5 ln 2
                [0.0, float("-inf"), float("-inf"), float("-inf")],  # one-hot: 0
            ],
            [
                [1000.0, 0.0, 0.0, 0.0],  # extremely peaked: ~0
                [5.0, 5.0, 5.0, 5.0],  # shift-invariant: ln 4
                [3.0, 3.0, float("-inf"), float("-inf")],  # two-way uniform: ln 2
            ],
        ]
    ).requires_grad_(True)
    ent = entropy_from_logits(logits)
    assert ent.shape == (2, 3)
    expected = [[math.log(4), 1.5 * ln2, 0.0], [0.0, math.log(4), ln2]]
    for got, exp in zip(ent.tolist(), expected):
        assert got == pytest.approx(exp, abs=1e-12)
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_entropy_half_precision_upcasts():
    logits = torch.zeros(1, 2, 8, dtype=torch.bfloat16)
    ent = entropy_from_logits(logits)
    assert ent.dtype == torch.float32
    assert ent.tolist()[0] == pytest.approx([math.log(8)] * 2)


def test_log_probs_from_logits():
    ln2 = math.log(2.0)
    logits = t(
        [
            [[ln2, 0.0, 0.0], [ln2, 0.0, 0.0]],  # p = 1/2, 1/4, 1/4
            [[1000.0, 0.0, 0.0], [7.0, 7.0, 7.0]],  # p ~ 1, e^-1000, e^-1000 ; uniform
        ]
    ).requires_grad_(True)
    labels = torch.tensor([[0, 2], [1, 1]])
    lp = log_probs_from_logits(logits, labels)
    expected = [[math.log(0.5), math.log(0.25)], [-1000.0, -math.log(3)]]
    for got, exp in zip(lp.tolist(), expected):
        assert got == pytest.approx(exp)
    lp.sum().backward()
    # d log p_y / d z = onehot(y) - softmax(z); row (0,0): [1-0.5, -0.25, -0.25]
    assert logits.grad[0, 0].tolist() == pytest.approx([0.5, -0.25, -0.25])


def test_log_probs_shape_mismatch_raises():
    with pytest.raises(ValueError):
        log_probs_from_logits(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))


# --------------------------------------------------------------------------- #
# kl penalty
# --------------------------------------------------------------------------- #

LP = [[-1.0, -2.0]]
REF = [[-1.5, -1.0]]  # lp - ref = 0.5, -1 ; ref - lp = -0.5, 1


@pytest.mark.parametrize(
    "kinds, expected",
    [
        (("kl", "k1"), [0.5, -1.0]),
        (("abs",), [0.5, 1.0]),
        (("mse", "k2"), [0.5 * 0.5**2, 0.5 * 1.0**2]),
        # exp(x) - x - 1 with x = ref - lp
        (("low_var_kl", "k3"), [math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1 - 1]),
    ],
)
def test_kl_penalty_kinds(kinds, expected):
    for kind in kinds:
        out = kl_penalty(t(LP), t(REF), kind)
        assert out.shape == (1, 2)
        assert out[0].tolist() == pytest.approx(expected), kind


def test_low_var_kl_is_clamped():
    # ref - lp = 15: e^15 - 16 > 10 -> 10 ; ref - lp = -30 -> clamped to -20: e^-20 + 19 -> 10
    out = kl_penalty(t([[0.0, 0.0]]), t([[15.0, -30.0]]), "low_var_kl")
    assert out.tolist() == [[10.0, 10.0]]
    # k3 is non-negative
    assert (kl_penalty(t([[0.3, -0.7]]), t([[-0.2, 0.1]]), "k3") >= 0).all()


def test_kl_penalty_unknown_kind():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(t(LP), t(REF), "full")
