"""The fused_residual_forward family, without a GPU: version 6 (bf16), the memory-bound version built
to close the last few percent to a copy's speed, takes the trainer's sizes and its grid is one
resident wave at the default sizes; at bf16 the statistics are those of the fp32 sum, not of the
rounded residual. (Version 6 on the CPU SIMT emulator: its header's [[emulate]] tables,
tests/test_emulator.py.)
"""

import numpy as np

import memory_bound
from workbench.check import compare, from_storage, make_case, to_storage
from workbench.family import Project

from conftest import ROOT


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
