"""The reduce family's reference, without a GPU: against PyTorch's sum on the CPU in float64 at
odd sizes.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.reduce import reduce

from references_helpers import needs_torch, torch


@needs_torch
@pytest.mark.parametrize("N", [1, 2, 3, 1000003])
def test_reduce_matches_torch_sum(N):
    x = np.random.default_rng(N).uniform(0, 1, N)
    got = reduce(x)["out"]
    assert got.shape == (1,)
    np.testing.assert_allclose(got[0], torch.from_numpy(x).sum().item(), rtol=1e-12)
