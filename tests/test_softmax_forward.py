"""The softmax_forward family at bf16, without a GPU: version 10 keeps its rows in registers without
spilling.
"""

from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT


FAMILY = Project(ROOT).family("softmax_forward")


def test_version_10_does_not_spill(nvcc):
    """Its rows live in registers: a spill would put them in local memory (i.e. DRAM) instead."""
    v = FAMILY.version(10)
    for arch in ("sm_80", "sm_90"):
        resources, _ = compile_only(v.path, arch)
        for kernel in v.kernels:
            r = resources[kernel]
            assert r.spill_stores == 0 and r.spill_loads == 0, (arch, kernel, r.line())
