"""The matmul_forward family's reference, without a GPU: against PyTorch's linear layer on the
CPU in float64 at odd sizes.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.matmul_forward import matmul_forward

from references_helpers import F, MATMUL_SHAPES, draw, needs_torch, t


@needs_torch
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
def test_matmul_forward_matches_torch_linear(shape):
    inp, weight, bias, _ = draw(shape, 0)
    want = F.linear(t(inp), t(weight), t(bias)).numpy()
    got = matmul_forward(inp, weight, bias)["out"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
