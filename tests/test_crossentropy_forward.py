"""The crossentropy_forward family's reference, without a GPU: against PyTorch's NLL of the
probabilities and cross-entropy of the logits behind them, on the CPU in float64 at odd sizes;
and the probability rows its inputs are drawn as.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.crossentropy_forward import crossentropy_forward, make_probs

from references_helpers import F, needs_torch, rows_and_targets, softmax64, torch


def test_make_probs_gives_valid_probability_rows():
    probs = make_probs(2, 3, 37, np.random.default_rng(2))["probs"]
    assert probs.shape == (2, 3, 37) and probs.dtype == np.float32
    assert (probs > 0).all()
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)


@needs_torch
@pytest.mark.parametrize("B, T, V", [(1, 1, 1), (2, 3, 37), (3, 5, 1025)])
def test_crossentropy_forward_matches_torch(B, T, V):
    rng = np.random.default_rng(3)
    logits, targets = rows_and_targets(rng, B, T, V)
    probs = softmax64(logits)
    ref = crossentropy_forward(probs, targets)["losses"]
    t = F.nll_loss(torch.log(torch.from_numpy(probs)).reshape(-1, V), torch.from_numpy(targets).reshape(-1),
                   reduction="none").reshape(B, T)
    np.testing.assert_allclose(ref, t.numpy(), rtol=1e-12, atol=1e-14)
    # and it is the cross-entropy of the logits behind those probabilities
    ce = F.cross_entropy(torch.from_numpy(logits).reshape(-1, V), torch.from_numpy(targets).reshape(-1),
                         reduction="none").reshape(B, T)
    np.testing.assert_allclose(ref, ce.numpy(), rtol=1e-10, atol=1e-12)


def test_crossentropy_forward_picks_the_targets_probability():
    probs = np.array([[[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]]])
    losses = crossentropy_forward(probs, np.array([[1, 2]]))["losses"]
    np.testing.assert_allclose(losses, -np.log([[0.5, 0.7]]), rtol=1e-15)
