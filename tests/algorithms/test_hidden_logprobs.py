"""Log-probs from hidden states (fused kernels) equal those of the full logits, values and gradients."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algorithms.token_logprobs import TokenScoring, hidden_token_log_probs, token_log_probs


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_equal_to_the_logits_path(checkpoint, entropy_grad):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 7, 16, generator=g, dtype=torch.float64)
    weight = torch.randn(50, 16, generator=g, dtype=torch.float64) * 0.3
    labels = torch.randint(0, 50, (3, 7), generator=g)
    scoring = TokenScoring(0.7, with_entropy=True, entropy_grad=entropy_grad, checkpoint=checkpoint)
    results = []
    for fused in (False, True):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        if fused:  # chunks of 2 positions: rows are cut in several pieces
            lp, ent = hidden_token_log_probs(h, w, None, labels, scoring, chunk_tokens=2)
        else:
            lp, ent = token_log_probs(h @ w.T, labels, 0.7, with_entropy=True, entropy_grad=entropy_grad)
        assert ent is not None
        (lp.sum() + 0.5 * ent.sum()).backward()
        results.append((lp.detach(), ent.detach(), h.grad, w.grad))
    for plain, fused in zip(*results, strict=True):
        torch.testing.assert_close(fused, plain, rtol=1e-10, atol=1e-10)


def test_without_entropy_and_without_grad():
    hidden, weight = torch.randn(2, 5, 8), torch.randn(11, 8)
    labels = torch.randint(0, 11, (2, 5))
    with torch.no_grad():
        lp, ent = hidden_token_log_probs(hidden, weight, torch.zeros(11), labels, TokenScoring(1.0, with_entropy=False))
    assert ent is None
    torch.testing.assert_close(lp, torch.log_softmax(hidden @ weight.T, -1).gather(-1, labels[..., None])[..., 0])
