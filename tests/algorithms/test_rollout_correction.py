import math

import pytest
import torch

from hybridrl.algorithms.losses import compute_policy_loss
from hybridrl.algorithms.rollout_correction import rollout_is_weights, rollout_probs_diff


def test_probs_diff_is_taken_in_probability_space_over_response_tokens():
    old = torch.log(torch.tensor([[0.5, 0.2, 0.9]]))
    rollout = torch.log(torch.tensor([[0.4, 0.2, 0.1]]))
    mask = torch.tensor([[1, 1, 0]])  # the 0.8 gap sits on padding
    metrics = rollout_probs_diff(old, rollout, mask)
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(0.1)
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(0.05)


def test_token_weights_are_truncated_ratios_and_zero_on_padding():
    old = torch.log(torch.tensor([[0.5, 0.9, 0.3]]))
    rollout = torch.log(torch.tensor([[0.25, 0.3, 0.3]]))
    weights, metrics = rollout_is_weights(old, rollout, torch.tensor([[1, 1, 0]]), "token", threshold=2.5)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.5, 0.0]]))
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(3.0)
    assert metrics["rollout_corr/rollout_is_truncated_frac"] == pytest.approx(0.5)


def test_sequence_weights_are_the_product_over_the_response():
    old = torch.log(torch.tensor([[0.5, 0.6], [0.2, 0.2]]))
    rollout = torch.log(torch.tensor([[0.25, 0.6], [0.4, 0.1]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    weights, _ = rollout_is_weights(old, rollout, mask, "sequence", threshold=10.0)
    torch.testing.assert_close(weights, torch.tensor([[2.0, 2.0], [0.5, 0.0]]))


def test_weights_scale_each_tokens_policy_loss():
    torch.manual_seed(0)
    old, new, adv = torch.randn(3, 2, 4).unbind(0)
    mask = torch.ones(2, 4)
    only_first = torch.zeros(2, 4)
    only_first[0, 0] = 1.0

    def loss(**kwargs):
        return compute_policy_loss(old, new, adv, mask, loss_agg_mode="token-mean", **kwargs)["pg_loss"]

    first_token = compute_policy_loss(old[:1, :1], new[:1, :1], adv[:1, :1], mask[:1, :1])["pg_loss"]
    torch.testing.assert_close(loss(is_weights=torch.full((2, 4), 2.0)), 2 * loss())
    torch.testing.assert_close(loss(is_weights=only_first), first_token / 8)  # token-mean over 8 tokens


def test_decoupled_ppo_objective_matches_a_hand_computation():
    """AReaL's decoupled PPO (async_training.compute_prox_log_prob): the clipped ratio against the proximal
    policy (the trainer's pass), each token weighted by min(pi_prox / pi_behaviour, C) from the generator's
    per-token log-probs, token-mean over the response."""
    behaviour = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -9.0]])
    proximal = torch.tensor([[-0.8, -2.5, -0.1], [-0.3, -0.2, -9.0]])
    current = torch.tensor([[-0.7, -2.4, -0.6], [-0.1, -0.1, -9.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    threshold, eps = 2.0, 0.2
    weights, _ = rollout_is_weights(proximal, behaviour, mask, "token", threshold)
    loss = compute_policy_loss(proximal, current, advantages, mask, eps, eps, is_weights=weights)["pg_loss"]
    terms = []
    for i in range(2):
        for j in range(3):
            if not mask[i, j]:
                continue
            w = min(math.exp(proximal[i, j] - behaviour[i, j]), threshold)
            r = math.exp(current[i, j] - proximal[i, j])
            a = float(advantages[i, j])
            terms.append(w * max(-a * r, -a * min(max(r, 1 - eps), 1 + eps)))
    assert abs(float(loss) - sum(terms) / len(terms)) < 1e-6
