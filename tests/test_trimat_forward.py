"""The trimat_forward family's reference, without a GPU: the causal scores' lower triangle, scaled,
against PyTorch on the CPU in float64 at odd sizes, and -inf above it.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.trimat_forward import trimat_forward

from references_helpers import ATTENTION_SHAPES, needs_torch, packed, torch_causal_scores


@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_trimat_is_the_scaled_lower_triangle(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=8)
    ref = trimat_forward(qkv, NH)["preatt"]
    expected = torch_causal_scores(qkv, NH).numpy()
    lower = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(ref[..., lower], expected[..., lower], atol=1e-12, rtol=1e-10)
    assert np.all(np.isneginf(ref[..., ~lower]))
