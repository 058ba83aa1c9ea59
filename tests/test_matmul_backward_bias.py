"""The matmul_backward_bias family, without a GPU: its reference against PyTorch's autograd on the
CPU in float64 at odd sizes (dbias accumulates), and the vectorised versions' precondition.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.matmul_backward_bias import matmul_backward_bias
from workbench.family import Project

from conftest import ROOT
from references_helpers import MATMUL_SHAPES, autograd, draw, needs_torch


@needs_torch
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
def test_matmul_backward_bias_matches_autograd_and_accumulates(shape):
    inp, weight, bias, dout = draw(shape, 4)
    dbias0 = np.random.default_rng(5).normal(size=bias.shape)
    _, _, db = autograd(inp, weight, bias, dout)
    ref = matmul_backward_bias(dbias0.copy(), dout)
    np.testing.assert_allclose(ref["dbias"], dbias0 + db, rtol=1e-12, atol=1e-12)


def test_the_vectorised_bias_versions_require_oc_multiple_of_4():
    fam = Project(ROOT).family("matmul_backward_bias")
    assert fam.version(5).unmet({"B": 2, "T": 3, "OC": 37}) == ["OC % 4 == 0"]
    assert fam.version(6).unmet({"B": 2, "T": 3, "OC": 37}) == ["OC % 4 == 0"]
    assert fam.version(4).unmet({"B": 2, "T": 3, "OC": 37}) == []
