"""The fused_residual_forward family, without a GPU: version 6 (bf16), the memory-bound version built
to close the last few percent to a copy's speed, takes the trainer's sizes and its grid is one
resident wave at the default sizes; at bf16 the statistics are those of the fp32 sum, not of the
rounded residual. (Version 6 on the CPU SIMT emulator: its header's [[emulate]] tables,
tests/test_emulator.py.)

Its NumPy reference (at the end): against PyTorch's add then layer_norm in float64 at odd sizes, and
equal to residual_forward then layernorm_forward; the PyTorch helper timed beside it. The tests that
call PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

import memory_bound
from references.fused_residual_forward import fused_residual_forward, torch_fused_residual_forward
from references.layernorm_forward import layernorm_forward
from references.residual_forward import residual_forward
from workbench.check import compare, from_storage, make_case, to_storage
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, ROW_SHAPES, needs_torch, t


FAMILY = Project(ROOT).family("fused_residual_forward")


def test_version_6s_header():
    v = FAMILY.version(6)
    assert v.precision == "bf16" and v.deterministic
    memory_bound.assert_takes_the_trainers_sizes(v)


def test_at_the_default_sizes_version_6s_grid_is_one_resident_wave():
    memory_bound.assert_one_resident_wave(FAMILY.version(6))


def test_fused_residual_must_normalize_the_fp32_sum_not_the_rounded_residual():
    """The family's tolerance comment: mean and rstd keep fp32's 1e-5, and the statistics of the
    bf16-rounded residual miss the reference's (of the exact sum) by more than that."""
    fam = FAMILY
    sizes = {"B": 2, "T": 64, "C": 768}
    case = make_case(fam, sizes, 0, "bf16")
    exact = sum(from_storage(case.inputs[k], "bf16").astype(np.float64) for k in ("inp1", "inp2"))
    rounded = from_storage(to_storage(exact.astype(np.float32), "bf16"), "bf16").astype(np.float64)
    mean_arg = next(a for a in fam.args_for("bf16") if a.name == "mean")
    atol, rtol = fam.tolerance(mean_arg, "bf16")
    assert compare(mean_arg, case.expected["mean"], exact.mean(-1), atol, rtol).ok
    assert not compare(mean_arg, case.expected["mean"], rounded.mean(-1), atol, rtol).ok
    # the residual itself is one rounding of the sum: inside the bf16 tolerance
    res_arg = next(a for a in fam.args_for("bf16") if a.name == "residual")
    assert compare(res_arg, case.expected["residual"], rounded, *fam.tolerance(res_arg, "bf16")).ok


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("shape", ROW_SHAPES)
def test_fused_residual_forward_matches_torch_add_then_layer_norm(shape):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=shape), rng.normal(0.3, 1, size=shape)
    w, bias = rng.normal(1, 0.1, size=shape[-1]), rng.normal(0, 0.1, size=shape[-1])
    ref = fused_residual_forward(a, b, w, bias, 1e-5)
    r = t(a) + t(b)
    np.testing.assert_allclose(ref["residual"], r.numpy(), rtol=1e-15)
    normed = F.layer_norm(r, (shape[-1],), t(w), t(bias), 1e-5)
    np.testing.assert_allclose(ref["normed"], normed.numpy(), atol=1e-12, rtol=1e-10)
    np.testing.assert_allclose(ref["mean"], r.mean(-1).numpy(), atol=1e-14)
    var = r.var(-1, unbiased=False).numpy()
    np.testing.assert_allclose(ref["rstd"], 1 / np.sqrt(var + 1e-5), rtol=1e-12)


def test_fused_residual_equals_residual_then_layernorm_forward():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 3, 37)), rng.normal(size=(2, 3, 37))
    w, bias = rng.normal(1, 0.1, size=37), rng.normal(0, 0.1, size=37)
    fused = fused_residual_forward(a, b, w, bias, 1e-5)
    ln = layernorm_forward(residual_forward(a, b)["out"], w, bias, 1e-5)
    for name in ("normed", "mean", "rstd"):
        np.testing.assert_allclose(fused[name], ln["out" if name == "normed" else name], rtol=1e-14)


@needs_torch
def test_torch_fused_residual_helper_returns_the_references_outputs_in_order():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 3, 37)), rng.normal(size=(2, 3, 37))
    w, bias = rng.normal(1, 0.1, size=37), rng.normal(0, 0.1, size=37)
    ref = fused_residual_forward(a, b, w, bias, 1e-5)
    got = torch_fused_residual_forward(t(a), t(b), t(w), t(bias), 1e-5)
    for name, value in zip(["residual", "normed", "mean", "rstd"], got):
        np.testing.assert_allclose(value.numpy().reshape(ref[name].shape), ref[name], rtol=1e-10, atol=1e-12)
