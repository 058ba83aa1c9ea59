"""The matmul_forward family's reference, without a GPU: against PyTorch's linear layer on the
CPU in float64 at odd sizes.

The tests that compare with PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.matmul_forward import matmul_forward
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, MATMUL_SHAPES, draw, needs_torch, t


@needs_torch
@pytest.mark.parametrize("shape", MATMUL_SHAPES)
def test_matmul_forward_matches_torch_linear(shape):
    inp, weight, bias, _ = draw(shape, 0)
    want = F.linear(t(inp), t(weight), t(bias)).numpy()
    got = matmul_forward(inp, weight, bias)["out"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_version_11_runs_the_plain_gemm_only_where_the_call_promises_a_zero_bias():
    """Version 11 is version 8's call, and the same call without the bias, chosen by zero_bias:
    exactly one of the two runs at either value, and they differ only in the bias."""
    from workbench import expr
    fam = Project(ROOT).family("matmul_forward")
    v8, v11 = fam.version(8), fam.version(11)
    assert fam.params["zero_bias"] == 0  # the checks run the bias step
    for zero_bias in (0, 1):
        env = {**fam.env({"B": 2, "T": 3, "C": 8, "OC": 16}), "zero_bias": zero_bias}
        (step,) = [s for s in v11.steps if expr.evaluate(s.when, env)]
        params = dict(step.params)
        assert ("bias" in params) == (zero_bias == 0)
        assert {k: v for k, v in params.items() if k != "bias"} == \
            {k: v for k, v in dict(v8.steps[0].params).items() if k != "bias"}
    assert dict(v11.steps[0].params) == dict(v8.steps[0].params)
