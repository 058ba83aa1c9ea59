"""The fused_classifier family at bf16, without a GPU: the reference zeroes the padding, and
version 6 keeps its rows in registers without spilling.
"""

import numpy as np

from workbench.check import make_case
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT


FAMILY = Project(ROOT).family("fused_classifier")


def test_the_fused_classifier_reference_at_bf16_zeroes_the_padding():
    fam = FAMILY
    sizes = {"B": 2, "T": 3, "V": 37, "Vp": 40}
    case = make_case(fam, sizes, 0, "bf16")
    assert np.all(case.expected["logits"][..., 37:] == 0)


def test_version_6_does_not_spill(nvcc):
    """Its rows live in registers: a spill would put them in local memory (i.e. DRAM) instead."""
    v = FAMILY.version(6)
    for arch in ("sm_80", "sm_90"):
        resources, _ = compile_only(v.path, arch)
        for kernel in v.kernels:
            r = resources[kernel]
            assert r.spill_stores == 0 and r.spill_loads == 0, (arch, kernel, r.line())
