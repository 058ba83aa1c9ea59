"""The matmul_backward family's reference, without a GPU: against PyTorch's autograd on the CPU in
float64 at odd sizes (dweight accumulates), and, with matmul_backward_bias's, against finite
differences of the forward.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.matmul_backward import matmul_backward
from references.matmul_backward_bias import matmul_backward_bias
from references.matmul_forward import matmul_forward

from references_helpers import MATMUL_SHAPES, autograd, draw, needs_torch, numeric_grad


@needs_torch
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
def test_matmul_backward_matches_autograd_and_accumulates(shape):
    inp, weight, bias, dout = draw(shape, 2)
    dweight0 = np.random.default_rng(3).normal(size=weight.shape)
    dx, dw, _ = autograd(inp, weight, bias, dout)
    ref = matmul_backward(dweight0.copy(), dout, inp, weight)
    np.testing.assert_allclose(ref["dinp"], dx, rtol=1e-12, atol=1e-12)
    # dweight is an inout: the reference must return old + new, not overwrite
    np.testing.assert_allclose(ref["dweight"], dweight0 + dw, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 7)])
def test_matmul_backward_references_match_finite_differences(shape):
    inp, weight, bias, dout = draw(shape, 6)
    loss = lambda: float((dout * matmul_forward(inp, weight, bias)["out"]).sum())
    ref = matmul_backward(np.zeros_like(weight), dout, inp, weight)
    np.testing.assert_allclose(ref["dinp"], numeric_grad(loss, inp), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref["dweight"], numeric_grad(loss, weight), rtol=1e-6, atol=1e-7)
    dbias = matmul_backward_bias(np.zeros_like(bias), dout)["dbias"]
    np.testing.assert_allclose(dbias, numeric_grad(loss, bias), rtol=1e-6, atol=1e-7)
