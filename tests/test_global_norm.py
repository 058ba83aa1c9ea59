"""The global_norm family's reference, without a GPU: the squared norm against PyTorch's vector
norm on the CPU in float64 at odd sizes.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.global_norm import global_norm

from references_helpers import needs_torch, torch


@needs_torch
@pytest.mark.parametrize("N", [1, 3, 37, 100003])
def test_global_norm_matches_torch_vector_norm(N):
    g = np.random.default_rng(N).normal(0, 0.01, N)
    got = global_norm(g)["norm2"]
    want = torch.linalg.vector_norm(torch.from_numpy(g)) ** 2
    assert got.shape == (1,)
    np.testing.assert_allclose(got[0], want.item(), rtol=1e-12)
