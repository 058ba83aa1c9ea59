"""The adamw family at bf16, without a GPU: the bf16 copy of the updated params is an output only at
bf16, and its tolerance fails a truncating conversion. (Version 5 on the CPU SIMT emulator: its
header's [[emulate]] tables, tests/test_emulator.py.)
"""

import numpy as np

from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT


FAMILY = Project(ROOT).family("adamw")


def passes(expected, got, atol, rtol):
    return bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


def test_adamw_returns_the_bf16_copy_of_the_updated_params_only_at_bf16():
    fam = FAMILY
    bf16 = make_case(fam, {"N": 37}, 1, "bf16")
    assert np.array_equal(bf16.expected["params_bf16"], bf16.expected["params"])
    assert "params_bf16" not in make_case(fam, {"N": 37}, 1).expected


def test_the_adamw_tolerance_fails_a_truncating_bf16_conversion():
    fam = FAMILY
    arg = next(a for a in fam.args_for("bf16") if a.name == "params_bf16")
    want = make_case(fam, {"N": 4099}, 0, "bf16").expected["params_bf16"]
    bits = np.asarray(want, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    assert not passes(want, bits.view(np.float32).astype(np.float64), *fam.tolerance(arg, "bf16"))
