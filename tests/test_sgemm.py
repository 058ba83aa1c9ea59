"""The sgemm family's reference, without a GPU: against PyTorch's matmul on the CPU in float64 at
odd sizes.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.sgemm import sgemm

from references_helpers import needs_torch, t


@needs_torch
@pytest.mark.parametrize("mnk", [(1, 1, 1), (3, 5, 7), (33, 65, 17)])
def test_sgemm_matches_torch_matmul(mnk):
    m, n, k = mnk
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, size=(m, k)), rng.uniform(-1, 1, size=(k, n))
    got = sgemm(a, b)["C"]
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, (t(a) @ t(b)).numpy(), rtol=1e-12, atol=1e-12)
