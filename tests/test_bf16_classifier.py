"""The bf16 precision of the loss-head families: fused_classifier, softmax_forward,
crossentropy_forward and crossentropy_softmax_backward (CPU only: contracts, cases, compiles)."""

import numpy as np
import pytest

from workbench.check import from_storage, make_case, to_storage
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT

# family -> (the args that are bf16 at bf16, the bf16 versions this group added)
BF16 = {
    "fused_classifier": ({"logits"}, {5, 6}),
    "softmax_forward": ({"inp", "out"}, {9, 10}),
    "crossentropy_forward": ({"probs"}, {2}),
    "crossentropy_softmax_backward": ({"probs", "dlogits"}, {3}),
}
# The fp32 tolerances of every output, as the fp32 contracts set them: bf16 must not loosen them.
FP32_TOLERANCE = {
    ("fused_classifier", "logits"): (1e-12, 1e-4),
    ("fused_classifier", "losses"): (1e-5, 1e-4),
    ("softmax_forward", "out"): (1e-8, 1e-4),
    ("crossentropy_forward", "losses"): (1e-5, 1e-5),
    ("crossentropy_softmax_backward", "dlogits"): (1e-10, 1e-5),
}
# One rounding to bf16 (8 significant bits) moves a value by at most 2^-8 of itself.
BF16_ROUNDING = 2.0 ** -8


def family(name):
    return Project(ROOT).family(name)


def bf16_round(values):
    return from_storage(to_storage(np.asarray(values, dtype=np.float32), "bf16"), "bf16").astype(np.float64)


@pytest.mark.parametrize("name", sorted(BF16))
def test_the_contract_lists_bf16_with_its_args(name):
    fam = family(name)
    assert "bf16" in fam.precision_names()
    assert set(fam.precisions["bf16"].args) == BF16[name][0]
    dtypes = {a.name: a.dtype for a in fam.args_for("bf16")}
    assert {n for n, d in dtypes.items() if d == "bf16"} == BF16[name][0]
    assert all(d == "i32" for n, d in dtypes.items() if n == "targets")


@pytest.mark.parametrize("name", sorted(BF16))
def test_fp32_tolerances_are_unchanged_and_fp32_outputs_keep_them_at_bf16(name):
    fam = family(name)
    for arg in fam.args:
        if not arg.is_output:
            continue
        assert fam.tolerance(arg, "fp32") == FP32_TOLERANCE[(name, arg.name)]
        if arg.name not in fam.precisions["bf16"].args:  # losses: computed in float at either precision
            assert fam.tolerance(arg, "bf16") == FP32_TOLERANCE[(name, arg.name)]


@pytest.mark.parametrize("name", sorted(BF16))
def test_bf16_tolerance_admits_one_rounding_and_rejects_zeros_and_two_percent(name):
    """The reference rounded once to bf16 (what a correct version stores) passes; an output of
    zeros, or one 2% off everywhere, fails: the tolerance is neither too tight nor toothless."""
    fam = family(name)
    args = {a.name: a for a in fam.args_for("bf16")}
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, 0, "bf16")
        for out in (n for n in fam.precisions["bf16"].args if args[n].is_output):
            atol, rtol = fam.tolerance(args[out], "bf16")
            assert BF16_ROUNDING * 2 <= rtol <= 1e-2
            ref = case.expected[out]

            def passes(got):
                return bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)))

            assert passes(bf16_round(ref)), (name, sizes)
            if np.abs(ref).max() > 0:  # V = 1: every gradient is exactly 0
                assert not passes(np.zeros_like(ref)), (name, sizes, "zeros pass")
                assert not passes(ref * 1.02 + np.sign(ref) * 2 * atol), (name, sizes, "2% off passes")


@pytest.mark.parametrize("name", sorted(BF16))
def test_bf16_cases_hold_the_fp32_draws_rounded(name):
    fam = family(name)
    for sizes in fam.test_sizes:
        wide, narrow = make_case(fam, sizes, 1, "fp32"), make_case(fam, sizes, 1, "bf16")
        for arg in fam.args_for("bf16"):
            if not arg.is_input:
                continue
            got = narrow.inputs[arg.name]
            if arg.dtype == "bf16":
                assert got.dtype == np.uint16
                assert np.array_equal(got, to_storage(wide.inputs[arg.name], "bf16"))
            else:
                assert np.array_equal(got, wide.inputs[arg.name])
        for out, ref in narrow.expected.items():
            assert ref.shape == wide.expected[out].shape
            assert np.isfinite(ref).all()


def test_the_fused_classifier_reference_at_bf16_zeroes_the_padding():
    fam = family("fused_classifier")
    sizes = {"B": 2, "T": 3, "V": 37, "Vp": 40}
    case = make_case(fam, sizes, 0, "bf16")
    assert np.all(case.expected["logits"][..., 37:] == 0)


@pytest.mark.parametrize("name", sorted(BF16))
def test_the_new_versions_are_bf16_and_one_handles_every_test_size(name):
    fam = family(name)
    versions = [v for v in fam.versions if v.number in BF16[name][1]]
    assert len(versions) == len(BF16[name][1])
    for v in versions:
        assert v.precision == "bf16" and v.kernels and v.changed and v.why, v.path
    for sizes in fam.test_sizes:
        assert any(not v.unmet(sizes) for v in versions), sizes
    # the numbering continues after the family's fp32 versions
    assert min(BF16[name][1]) == max(v.number for v in fam.versions if v.precision == "fp32") + 1


@pytest.mark.parametrize("name,number", [("fused_classifier", 6), ("softmax_forward", 10)])
def test_the_row_in_registers_versions_do_not_spill(nvcc, name, number):
    """Their rows live in registers: a spill would put them in local memory (i.e. DRAM) instead."""
    v = family(name).version(number)
    for arch in ("sm_80", "sm_90"):
        resources, _ = compile_only(v.path, arch)
        for kernel in v.kernels:
            r = resources[kernel]
            assert r.spill_stores == 0 and r.spill_loads == 0, (arch, kernel, r.line())
