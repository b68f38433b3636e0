"""PPO losses, loss aggregation, per-token log-probs / entropy and KL estimators."""

import math

import pytest
import torch

from hybridrl.algorithms import (
    POLICY_LOSSES,
    agg_loss,
    compute_kl_loss,
    compute_policy_loss,
    compute_policy_loss_gspo,
    compute_value_loss,
    entropy_from_logits,
    get_policy_loss,
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
    out_pos = compute_policy_loss(
        t([[-1.0]]), t([[-1.0 + math.log(5.0)]]), t([[1.0]]), torch.ones(1, 1), clip_ratio_c=1.5
    )
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
    out32 = compute_policy_loss(torch.zeros(1, 1), torch.full((1, 1), 200.0), -torch.ones(1, 1), torch.ones(1, 1))
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


# --------------------------------------------------------------------------- #
# policy-loss registry and GSPO
# --------------------------------------------------------------------------- #


def test_policy_loss_registry():
    assert get_policy_loss("vanilla") is compute_policy_loss
    assert get_policy_loss("gspo") is compute_policy_loss_gspo
    assert set(POLICY_LOSSES) == {"vanilla", "gspo", "cispo", "geo_mean"}
    with pytest.raises(ValueError, match="gspo") as info:
        get_policy_loss("ppo2")
    assert "vanilla" in str(info.value) and "ppo2" in str(info.value)


# Row 0: token log-ratios 0.3, -0.1, 0.1 -> mean 0.1  -> s0 = e^0.1  ~ 1.1052, A = +1
# Row 1: token log-ratios 0.2, -0.6 (t=2 padding) -> mean -0.2 -> s1 = e^-0.2 ~ 0.8187, A = -1
GSPO_LOG_RATIOS = [[0.3, -0.1, 0.1], [0.2, -0.6]]
GSPO_OLD = [[-1.0, -1.0, -1.0], [-1.0, -1.0, 1000.0]]  # 1000 is padding garbage
GSPO_ADV = [[1.0, 1.0, 1.0], [-1.0, -1.0, NAN]]  # NaN is padding garbage
GSPO_MASK = [[1, 1, 1], [1, 1, 0]]
S0, S1 = math.exp(0.1), math.exp(-0.2)


def _gspo_log_prob(pad=NAN):
    return torch.tensor(
        [[-1.0 + x for x in GSPO_LOG_RATIOS[0]], [-1.0 + x for x in GSPO_LOG_RATIOS[1]] + [pad]],
        dtype=torch.float64,
        requires_grad=True,
    )


def _gspo(lp, **kwargs):
    return compute_policy_loss_gspo(t(GSPO_OLD), lp, t(GSPO_ADV), torch.tensor(GSPO_MASK), **kwargs)


# Clip range [1 - 0.2, 1 + 0.05] = [0.8, 1.05]; every token of a row has the row's ratio:
#   row 0: s0 = 1.1052, A = +1: l1 = -1.1052, l2 = -1.05   -> -1.05 (clipped, 3 tokens)
#   row 1: s1 = 0.8187, A = -1: l1 = 0.8187,  l2 = 0.8187  ->  0.8187 (not clipped)
GSPO_CLIP = dict(clip_ratio_low=0.2, clip_ratio_high=0.05)


def test_gspo_matches_hand_computation():
    out = _gspo(_gspo_log_prob(), **GSPO_CLIP, loss_agg_mode="seq-mean-token-mean")
    assert set(out) == {"pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}
    # row means -1.05 and s1, mean over the 2 rows
    assert out["pg_loss"].item() == pytest.approx((-1.05 + S1) / 2)
    assert out["pg_clipfrac"].item() == pytest.approx(3 / 5)
    assert out["pg_clipfrac_lower"].item() == 0.0
    # ppo_kl: token mean of old - new = -(0.3 - 0.1 + 0.1 + 0.2 - 0.6)/5 = 0.02
    assert out["ppo_kl"].item() == pytest.approx(0.02)
    assert out["pg_loss"].requires_grad and not out["ppo_kl"].requires_grad

    # token-mean weighs row 0's 3 tokens against row 1's 2
    out_tm = _gspo(_gspo_log_prob(), **GSPO_CLIP, loss_agg_mode="token-mean")
    assert out_tm["pg_loss"].item() == pytest.approx((3 * -1.05 + 2 * S1) / 5)


def test_gspo_default_aggregation_is_seq_mean_token_mean():
    default = _gspo(_gspo_log_prob(), **GSPO_CLIP)
    explicit = _gspo(_gspo_log_prob(), **GSPO_CLIP, loss_agg_mode="seq-mean-token-mean")
    assert default["pg_loss"].item() == explicit["pg_loss"].item()


def test_gspo_sequence_ratio_is_exp_of_mean_log_ratio():
    # wide clip range: nothing clipped, so loss_i = -A_i * s_i with s_i = exp(mean log-ratio)
    adv = t([[-1.0, -1.0, -1.0], [0.0, 0.0, NAN]])  # only row 0 counts
    out = compute_policy_loss_gspo(
        t(GSPO_OLD),
        _gspo_log_prob(),
        adv,
        torch.tensor(GSPO_MASK),
        clip_ratio_low=0.9,
        clip_ratio_high=10.0,
        loss_agg_mode="seq-mean-token-sum",
    )
    # row 0: token sum = 3 * e^0.1 (every token carries s0, NOT its own e^0.3, e^-0.1, e^0.1) ; row 1: 0
    assert out["pg_loss"].item() == pytest.approx(3 * S0 / 2)
    assert out["pg_loss"].item() != pytest.approx((math.exp(0.3) + math.exp(-0.1) + math.exp(0.1)) / 2)
    # row 1 alone: padding (log-ratio 1000 - NaN) is not part of the mean
    adv1 = t([[0.0, 0.0, 0.0], [-1.0, -1.0, NAN]])
    out1 = compute_policy_loss_gspo(
        t(GSPO_OLD),
        _gspo_log_prob(),
        adv1,
        torch.tensor(GSPO_MASK),
        clip_ratio_low=0.9,
        clip_ratio_high=10.0,
        loss_agg_mode="seq-mean-token-mean",
    )
    assert out1["pg_loss"].item() == pytest.approx(S1 / 2)


def test_gspo_gradient_manual():
    lp = _gspo_log_prob()
    out = _gspo(lp, **GSPO_CLIP, loss_agg_mode="seq-mean-token-mean")
    out["pg_loss"].backward()
    # row 0 is clipped -> 0. Row 1: pg_loss = 1/2 * (1/2) * sum_t (-A) * s_1,t and
    # d s_1,t / d lp_1,t = s1 (sg construction), so each valid token gets 1/2 * 1/2 * s1.
    # (Same as differentiating the sequence objective -A * exp(mean log-ratio) / 2:
    #  d/d lp_1,t = s1 / |y_1| / 2.)  Padding: 0, and finite despite the NaN log-prob.
    expected = [[0.0, 0.0, 0.0], [0.25 * S1, 0.25 * S1, 0.0]]
    assert torch.isfinite(lp.grad).all()
    for got, exp in zip(lp.grad.tolist(), expected):
        assert got == pytest.approx(exp)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean", "seq-mean-token-sum"])
def test_gspo_gradient_matches_finite_difference(mode):
    # The sg construction gives each token the gradient s_i, while the true derivative of
    # s_i = exp(mean log-ratio) is s_i / |y_i| per token; both sum to the same row gradient,
    # so for any aggregation that weighs a row's tokens equally, autograd == finite difference.
    kw = dict(clip_ratio_low=0.9, clip_ratio_high=10.0, loss_agg_mode=mode)  # nothing clipped
    adv = t([[1.5, 1.5, 1.5], [-0.5, -0.5, NAN]])
    mask = torch.tensor(GSPO_MASK)

    def loss(lp):
        return compute_policy_loss_gspo(t(GSPO_OLD), lp, adv, mask, **kw)["pg_loss"]

    lp = _gspo_log_prob(pad=0.0)
    loss(lp).backward()
    h = 1e-6
    for b, tt in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]:
        plus, minus = lp.detach().clone(), lp.detach().clone()
        plus[b, tt] += h
        minus[b, tt] -= h
        fd = (loss(plus).item() - loss(minus).item()) / (2 * h)
        assert lp.grad[b, tt].item() == pytest.approx(fd, rel=1e-6, abs=1e-9), (b, tt)
    assert lp.grad[1, 2].item() == 0.0


def test_gspo_dual_clip():
    # one row, log-ratios 2, 2 -> s = e^2 ~ 7.39, A = -1: loss 7.39 capped at -A * 3 = 3
    old = t([[0.0, 0.0]])
    lp = t([[2.0, 2.0]])
    out = compute_policy_loss_gspo(old, lp, t([[-1.0, -1.0]]), torch.ones(1, 2), clip_ratio_c=3.0)
    assert out["pg_loss"].item() == pytest.approx(3.0)
    assert out["pg_clipfrac_lower"].item() == pytest.approx(1.0)
    without = compute_policy_loss_gspo(old, lp, t([[-1.0, -1.0]]), torch.ones(1, 2))
    assert without["pg_loss"].item() == pytest.approx(math.exp(2.0))
    with pytest.raises(ValueError):
        compute_policy_loss_gspo(old, lp, t([[-1.0, -1.0]]), torch.ones(1, 2), clip_ratio_c=0.5)


def test_gspo_padding_garbage_does_not_change_result():
    base = _gspo(_gspo_log_prob(pad=0.0), **GSPO_CLIP, clip_ratio_c=3.0)
    old2, adv2 = t(GSPO_OLD), t(GSPO_ADV)
    old2[1, 2], adv2[1, 2] = -1e9, 1e9
    for pad in (NAN, float("inf"), float("-inf")):
        lp = _gspo_log_prob(pad=pad)
        other = compute_policy_loss_gspo(old2, lp, adv2, torch.tensor(GSPO_MASK), **GSPO_CLIP, clip_ratio_c=3.0)
        for k in base:
            assert torch.equal(base[k].detach(), other[k].detach()), k
        other["pg_loss"].backward()
        assert torch.isfinite(lp.grad).all() and lp.grad[1, 2].item() == 0.0


def test_gspo_same_signature_as_vanilla():
    # the registry is called positionally/by keyword exactly like compute_policy_loss
    args = (t(OLD_LP), _policy_inputs()[1], t(ADV), torch.tensor(PG_MASK))
    kw = dict(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="token-mean")
    for name in POLICY_LOSSES:
        out = get_policy_loss(name)(*args, **kw)
        assert set(out) == {"pg_loss", "pg_clipfrac", "ppo_kl", "pg_clipfrac_lower"}
        assert torch.isfinite(out["pg_loss"])


# --------------------------------------------------------------------------- #
# kl loss (use_kl_loss)
# --------------------------------------------------------------------------- #

# valid lp - ref: 0.5, -1.0, 0.0 (row 0) ; -0.2 (row 1) ; row 1 t=1,2 are padding garbage
KL_LP = [[-1.0, -2.0, -0.5], [-1.0, NAN, float("inf")]]
KL_REF = [[-1.5, -1.0, -0.5], [-0.8, NAN, 7.0]]
KL_MASK = [[1, 1, 1], [1, 0, 0]]
KL_X = [-0.5, 1.0, 0.0, 0.2]  # ref - lp on the 4 valid tokens


def _k3(x):
    return math.exp(x) - x - 1


@pytest.mark.parametrize(
    "kind, expected",
    [
        ("kl", (0.5 - 1.0 + 0.0 - 0.2) / 4),  # -0.175
        ("k1", (0.5 - 1.0 + 0.0 - 0.2) / 4),
        ("abs", (0.5 + 1.0 + 0.0 + 0.2) / 4),  # 0.425
        ("mse", 0.5 * (0.25 + 1.0 + 0.0 + 0.04) / 4),  # 0.16125
        ("k2", 0.5 * (0.25 + 1.0 + 0.0 + 0.04) / 4),
        ("low_var_kl", sum(_k3(x) for x in KL_X) / 4),
        ("k3", sum(_k3(x) for x in KL_X) / 4),
    ],
)
def test_kl_loss_token_mean(kind, expected):
    lp = t(KL_LP).requires_grad_(True)
    ref = t(KL_REF).requires_grad_(True)
    loss = compute_kl_loss(lp, ref, torch.tensor(KL_MASK), kind)
    assert loss.dim() == 0
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert torch.isfinite(lp.grad).all()
    assert lp.grad[1, 1].item() == 0.0 and lp.grad[1, 2].item() == 0.0
    assert ref.grad is None  # the reference is detached


def test_kl_loss_gradients():
    mask = torch.tensor(KL_MASK)
    # k1: d/dlp (lp - ref)/4 = 1/4 on valid tokens
    lp = t(KL_LP).requires_grad_(True)
    compute_kl_loss(lp, t(KL_REF), mask, "k1").backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.25, 0.25, 0.25])
    assert lp.grad.tolist()[1] == pytest.approx([0.25, 0.0, 0.0])
    # k2: d/dlp 0.5 (lp - ref)^2 / 4 = (lp - ref)/4 -> 0.125, -0.25, 0, -0.05
    lp = t(KL_LP).requires_grad_(True)
    compute_kl_loss(lp, t(KL_REF), mask, "k2").backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.125, -0.25, 0.0])
    assert lp.grad.tolist()[1] == pytest.approx([-0.05, 0.0, 0.0])
    # k3: x = ref - lp, d/dlp (e^x - x - 1)/4 = (1 - e^x)/4
    lp = t(KL_LP).requires_grad_(True)
    compute_kl_loss(lp, t(KL_REF), mask, "k3").backward()
    exp_grad = [(1 - math.exp(x)) / 4 for x in KL_X]
    assert lp.grad.tolist()[0] == pytest.approx(exp_grad[:3])
    assert lp.grad.tolist()[1] == pytest.approx([exp_grad[3], 0.0, 0.0])


def test_kl_loss_agg_mode_and_unknown_kind():
    loss = compute_kl_loss(t(KL_LP), t(KL_REF), torch.tensor(KL_MASK), "k1", loss_agg_mode="seq-mean-token-mean")
    # row means (0.5 - 1 + 0)/3 = -1/6 and -0.2, mean over 2 rows
    assert loss.item() == pytest.approx((-1 / 6 - 0.2) / 2)
    with pytest.raises(ValueError, match="low_var_kl"):
        compute_kl_loss(t(KL_LP), t(KL_REF), torch.tensor(KL_MASK), "full")


# -- CISPO and GMPO (verl's cispo and geo_mean loss modes) ------------------------------------------------


def _two_rows():
    old = torch.zeros(2, 3)
    new = torch.tensor([[0.1, -0.5, 0.0], [0.05, 0.3, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    return old, new, adv, mask


def test_cispo_keeps_a_gradient_on_clipped_tokens_scaled_by_the_clipped_weight():
    old, new, adv, mask = _two_rows()
    out = get_policy_loss("cispo")(
        old, new, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2, loss_agg_mode="seq-mean-token-sum"
    )
    out["pg_loss"].backward()
    ratio = torch.exp(new.detach() - old)
    weight = ratio.clamp(0.8, 1.2)
    assert torch.allclose(new.grad, -weight * adv * mask / 2)  # every valid token, clipped too (-0.5: 0.8 x A)
    assert new.grad[0, 1] != 0  # PPO's clip would drop this token's gradient
    assert out["pg_clipfrac"].item() == pytest.approx(2 / 5)  # log-ratios -0.5 and 0.3 fall outside [0.8, 1.2]


def test_cispo_gradient_equals_ppos_inside_the_clip_range():
    old, new, adv, mask = _two_rows()
    small = (new.detach() * 0.1).requires_grad_(True)  # every ratio inside [0.8, 1.2]
    cispo = get_policy_loss("cispo")(old, small, adv, mask, loss_agg_mode="token-mean")["pg_loss"]
    (g_cispo,) = torch.autograd.grad(cispo, small)
    ppo = get_policy_loss("vanilla")(old, small, adv, mask, loss_agg_mode="token-mean")["pg_loss"]
    (g_ppo,) = torch.autograd.grad(ppo, small)
    assert torch.allclose(g_cispo, g_ppo)


def test_gmpo_sequence_ratio_is_the_geometric_mean_of_clipped_token_ratios():
    old, new, adv, mask = _two_rows()
    out = get_policy_loss("geo_mean")(old, new, adv, mask, clip_ratio_low=0.4, clip_ratio_high=0.4)
    # row 0 (A = 1 > 0): log-ratios 0.1 and -0.5, the low side is not capped for A > 0 -> mean -0.2
    # row 1 (A = -2 < 0): 0.05, 0.3, 0.0 inside the range -> mean 0.35 / 3
    expected = (-(1.0) * math.exp(-0.2) + 2.0 * math.exp(0.35 / 3)) / 2
    assert out["pg_loss"].item() == pytest.approx(expected, rel=1e-6)
    out["pg_loss"].backward()
    # d/d new_t of -A_i exp(mean_t x_t) / 2 = -A_i r_i / (2 |y_i|) on each of the row's tokens
    assert new.grad[0, 0].item() == pytest.approx(-math.exp(-0.2) / 4, rel=1e-6)
    assert new.grad[0, 2].item() == 0.0  # padding


def test_gmpo_caps_the_log_ratio_where_it_would_raise_the_objective():
    old = torch.zeros(1, 2)
    new = torch.tensor([[1.0, 0.0]], requires_grad=True)  # log-ratio 1.0 > high = 0.4 with A > 0: capped
    out = get_policy_loss("geo_mean")(old, new, torch.ones(1, 2), torch.ones(1, 2))
    assert out["pg_loss"].item() == pytest.approx(-math.exp(0.2), rel=1e-6)
    out["pg_loss"].backward()
    assert new.grad[0, 0].item() == 0.0  # the capped token gives no gradient, as PPO's clip
    assert out["pg_clipfrac"].item() == pytest.approx(0.5)
