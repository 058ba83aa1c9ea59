"""The residual_forward family's reference, without a GPU: against PyTorch's sum on the CPU in
float64 at odd sizes, exactly.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.residual_forward import residual_forward

from references_helpers import ROW_SHAPES, needs_torch, t


@needs_torch
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_residual_forward_matches_torch(shape):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=shape), rng.normal(size=shape)
    np.testing.assert_allclose(residual_forward(a, b)["out"], (t(a) + t(b)).numpy(), rtol=0, atol=0)
