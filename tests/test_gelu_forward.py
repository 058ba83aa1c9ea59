"""The gelu_forward family's reference, without a GPU: PyTorch's tanh GELU on the CPU in float64
at odd sizes, and not the exact erf one.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.gelu_forward import gelu_forward

from references_helpers import F, ROW_SHAPES, needs_torch, t


@needs_torch
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_gelu_forward_matches_torch_tanh_approximation(shape):
    x = np.random.default_rng(4).normal(0, 3, size=shape)
    np.testing.assert_allclose(gelu_forward(x)["out"], F.gelu(t(x), approximate="tanh").numpy(),
                               atol=1e-14, rtol=1e-12)


@needs_torch
def test_gelu_forward_is_not_the_exact_erf_gelu():
    x = np.linspace(-3, 3, 101)
    assert np.abs(gelu_forward(x)["out"] - F.gelu(t(x)).numpy()).max() > 1e-4
