"""The softmax_forward family at bf16, without a GPU: version 10 keeps its rows in registers without
spilling.

Its NumPy reference (at the end): against torch.softmax in float64 at odd sizes; large logits do not
overflow; a single column gives 1. The tests that call PyTorch skip themselves where it is not
installed.
"""

import numpy as np
import pytest

from references.softmax_forward import softmax_forward
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT
from references_helpers import needs_torch, torch


FAMILY = Project(ROOT).family("softmax_forward")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])  # sm_80 with the slow cases (conftest.py)
def test_version_10_does_not_spill(nvcc, arch):
    """Its rows live in registers: a spill would put them in local memory (i.e. DRAM) instead."""
    v = FAMILY.version(10)
    resources, _ = compile_only(v.path, arch)
    for kernel in v.kernels:
        r = resources[kernel]
        assert r.spill_stores == 0 and r.spill_loads == 0, (arch, kernel, r.line())


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (5, 1025), (2, 4099)])
def test_softmax_forward_matches_torch(shape):
    x = np.random.default_rng(0).normal(0, 2, size=shape)
    ref = softmax_forward(x)["out"]
    np.testing.assert_allclose(ref, torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-12, atol=0)


def test_softmax_forward_subtracts_the_max_so_large_logits_do_not_overflow():
    x = np.random.default_rng(1).normal(0, 1, size=(2, 37)) + 1000.0  # exp(1000) is inf
    out = softmax_forward(x)["out"]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(out, softmax_forward(x - 1000.0)["out"], rtol=1e-9)


def test_softmax_forward_of_a_single_column_is_one():
    assert softmax_forward(np.array([[-3.0], [7.5]]))["out"].tolist() == [[1.0], [1.0]]
