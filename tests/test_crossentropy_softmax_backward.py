"""The crossentropy_softmax_backward family's reference, without a GPU: against PyTorch's autograd
through cross-entropy on the CPU in float64 at odd sizes and against finite differences; it
writes dlogits rather than accumulating.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.crossentropy_softmax_backward import crossentropy_softmax_backward

from references_helpers import F, needs_torch, rows_and_targets, softmax64, torch


def weighted_loss(logits, targets, dlosses):
    """sum over positions of dlosses * cross-entropy(logits): its gradient is the reference's."""
    p = softmax64(logits)
    picked = np.take_along_axis(p, targets[..., None], axis=-1)[..., 0]
    return float((dlosses * -np.log(picked)).sum())


@needs_torch
@pytest.mark.parametrize("B, T, V", [(1, 1, 1), (2, 3, 37), (1, 5, 1025)])
def test_crossentropy_softmax_backward_matches_torch_autograd(B, T, V):
    rng = np.random.default_rng(4)
    logits, targets = rows_and_targets(rng, B, T, V)
    dlosses = rng.uniform(-1, 1, size=(B, T))
    ref = crossentropy_softmax_backward(softmax64(logits), targets, dlosses)["dlogits"]
    x = torch.from_numpy(logits).requires_grad_(True)
    losses = F.cross_entropy(x.reshape(-1, V), torch.from_numpy(targets).reshape(-1), reduction="none")
    losses.backward(torch.from_numpy(dlosses).reshape(-1))
    np.testing.assert_allclose(ref, x.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_crossentropy_softmax_backward_matches_finite_differences():
    rng = np.random.default_rng(5)
    B, T, V = 2, 2, 5
    logits, targets = rows_and_targets(rng, B, T, V, sigma=1.0)
    dlosses = rng.uniform(-1, 1, size=(B, T))
    ref = crossentropy_softmax_backward(softmax64(logits), targets, dlosses)["dlogits"]
    h = 1e-6
    fd = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        plus, minus = logits.copy(), logits.copy()
        plus[idx] += h
        minus[idx] -= h
        fd[idx] = (weighted_loss(plus, targets, dlosses) - weighted_loss(minus, targets, dlosses)) / (2 * h)
    np.testing.assert_allclose(ref, fd, rtol=1e-6, atol=1e-8)


def test_crossentropy_softmax_backward_writes_rather_than_accumulates():
    probs = np.full((1, 1, 4), 0.25)
    dlogits = crossentropy_softmax_backward(probs, np.array([[3]]), np.array([[2.0]]))["dlogits"]
    np.testing.assert_allclose(dlogits, [[[0.5, 0.5, 0.5, -1.5]]], rtol=1e-15)
