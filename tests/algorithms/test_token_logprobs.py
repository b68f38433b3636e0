"""Chunked log-probs and entropy equal the direct computation, values and gradients."""

from __future__ import annotations

import pytest
import torch

from hybridrl.algorithms.token_logprobs import entropy_from_logits, log_probs_from_logits, token_log_probs


def direct(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    z = logits.float() / temperature  # the whole (B, T, V) fp32 copy this module avoids
    return log_probs_from_logits(z, labels), entropy_from_logits(z)


def make(dtype: torch.dtype = torch.float32, vocab: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    full = torch.randn(3, 9, vocab, generator=g) * 3
    logits = full[:, 2:8, :].to(dtype)  # a view, as the roles pass it
    labels = torch.randint(0, vocab, (3, 6), generator=g)
    return logits, labels


@pytest.mark.parametrize("chunk", [1, 4, 6, 100, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_values_equal_the_direct_computation(chunk, dtype):
    logits, labels = make(dtype)
    lp, ent = token_log_probs(logits, labels, 0.7, with_entropy=True, chunk_tokens=chunk)
    ref_lp, ref_ent = direct(logits, labels, 0.7)
    assert lp.dtype == torch.float32 and ent is not None
    torch.testing.assert_close(lp, ref_lp, rtol=0, atol=1e-6)
    torch.testing.assert_close(ent, ref_ent, rtol=0, atol=1e-5)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_gradients_equal_the_direct_computation(checkpoint):
    logits, labels = make()
    weights = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))

    def grads(fn) -> torch.Tensor:
        x = logits.detach().clone().requires_grad_(True)
        lp, ent = fn(x)
        ((lp * weights).sum() + 0.1 * ent.sum()).backward()
        return x.grad

    chunked = grads(lambda x: token_log_probs(x, labels, 0.7, with_entropy=True, checkpoint=checkpoint, chunk_tokens=4))
    reference = grads(lambda x: direct(x, labels, 0.7))
    torch.testing.assert_close(chunked, reference, rtol=0, atol=1e-6)


def test_entropy_without_gradients_is_a_metric():
    logits, labels = make()
    x = logits.detach().clone().requires_grad_(True)
    lp, ent = token_log_probs(x, labels, with_entropy=True, entropy_grad=False, chunk_tokens=4)
    assert lp.requires_grad and ent is not None and not ent.requires_grad
    torch.testing.assert_close(ent, direct(logits, labels, 1.0)[1], rtol=0, atol=1e-5)


def test_masked_vocabulary_and_empty_batches():
    logits, labels = make()
    logits = logits.clone()
    logits[..., :10] = float("-inf")
    labels = labels.clamp(min=10)
    lp, ent = token_log_probs(logits, labels, with_entropy=True, chunk_tokens=5)
    assert torch.isfinite(lp).all() and ent is not None and torch.isfinite(ent).all()
    empty_lp, empty_ent = token_log_probs(torch.zeros(0, 4, 7), torch.zeros(0, 4, dtype=torch.long), with_entropy=True)
    assert empty_lp.shape == (0, 4) and empty_ent is not None and empty_ent.shape == (0, 4)
