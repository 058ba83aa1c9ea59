"""The gelu_backward family's reference, without a GPU: against PyTorch's autograd on the CPU in
float64 at odd sizes and against finite differences; the PyTorch helper the workbench times
beside it; and the kernels' float32 logistic form of GELU (forward and derivative) against
the references.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.gelu_backward import gelu_backward, torch_gelu_backward
from references.gelu_forward import gelu_forward

from references_helpers import F, ROW_SHAPES, needs_torch, t


@needs_torch
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_gelu_backward_matches_autograd(shape):
    rng = np.random.default_rng(5)
    x, dout = rng.normal(0, 3, size=shape), rng.normal(size=shape)
    xt = t(x).requires_grad_()
    F.gelu(xt, approximate="tanh").backward(t(dout))
    np.testing.assert_allclose(gelu_backward(x, dout)["dinp"], xt.grad.numpy(), atol=1e-13, rtol=1e-11)


def test_gelu_backward_matches_finite_differences():
    rng = np.random.default_rng(6)
    x, dout = rng.normal(0, 2, size=(2, 5)), rng.normal(size=(2, 5))
    h = 1e-6
    fd = (gelu_forward(x + h)["out"] - gelu_forward(x - h)["out"]) / (2 * h) * dout
    np.testing.assert_allclose(gelu_backward(x, dout)["dinp"], fd, atol=1e-8, rtol=1e-7)


@needs_torch
def test_torch_gelu_backward_helper_matches_the_reference():
    rng = np.random.default_rng(7)
    x, dout = rng.normal(0, 3, size=(3, 37)), rng.normal(size=(3, 37))
    np.testing.assert_allclose(torch_gelu_backward(t(x), t(dout)).numpy(), gelu_backward(x, dout)["dinp"],
                               atol=1e-13, rtol=1e-11)


def _kernel_gelu_math_f32(x):
    """The kernels' float32 formulas: 0.5 (1 + tanh u) as the logistic 1 / (1 + exp(-2u))."""
    f = np.float32
    x = x.astype(f)
    x2 = x * x
    u = f(0.7978845608028654) * (x + f(0.044715) * x2 * x)
    du = f(0.7978845608028654) * (f(1) + f(3 * 0.044715) * x2)
    e = np.exp(np.minimum(f(-2) * u, f(80))).astype(f)
    s = (f(1) / (f(1) + e)).astype(f)
    return x * s, s + f(2) * x * s * (e * s) * du


def test_the_kernels_logistic_gelu_stays_within_the_elementwise_tolerance_in_float32():
    x = np.concatenate([np.linspace(-40, 40, 200001), np.random.default_rng(8).normal(0, 3, 100000)])
    x = x.astype(np.float32).astype(np.float64)
    out, grad = _kernel_gelu_math_f32(x)
    ref_out = gelu_forward(x)["out"]
    ref_grad = gelu_backward(x, np.ones_like(x))["dinp"]
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(grad))
    # a tenth of the families' 1e-5 tolerance, leaving room for the fast exp's few ulp
    assert np.all(np.abs(out - ref_out) <= 1e-6 + 1e-6 * np.abs(ref_out))
    assert np.all(np.abs(grad - ref_grad) <= 1e-6 + 1e-6 * np.abs(ref_grad))
