"""The unpermute family, without a GPU: version 4 (fp32), the input-order kernel
(kernels/common/permute_units.cuh), takes the trainer's sizes and refuses what 32-bit indexing
cannot reach. (On the CPU SIMT emulator, bit for bit against the reference: its header's
[[emulate]] tables, tests/test_emulator.py.)
"""

import sys
from pathlib import Path

from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


FAMILY = Project(ROOT).family("unpermute")


def test_version_4_takes_the_trainers_sizes_and_refuses_what_32_bits_cannot_index():
    v = FAMILY.version(4)
    assert v.precision == "fp32"
    for NH in (12, 16, 20, 25):
        assert not v.unmet({"B": 32, "T": 1024, "NH": NH, "HS": 64})
    assert v.unmet({"B": 256, "T": 4096, "NH": 32, "HS": 64})  # N = 2^31
    assert v.unmet({"B": 1, "T": 4, "NH": 2, "HS": 6})
    assert len({FAMILY.format_sizes(s) for s, _ in runner.cases(v)}) >= 6
