"""permute 4 (fp32) and 5 (bf16) and unpermute 4 (fp32): the input-order kernels
(kernels/common/permute_units.cuh) on the CPU SIMT emulator, bit for bit against the reference,
at every family test size each accepts and at sizes that reach its corners (a single unit; head
rows of one unit; GPT-2 XL's 25 heads; a last block only partly used), every listed block size;
and the preconditions that keep their 32-bit indexing safe."""

import shutil
import sys
from pathlib import Path

import pytest

from workbench.family import Project

from conftest import ROOT, emulator_cases

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
EXTRA = [{"B": 1, "T": 1, "NH": 1, "HS": 8}, {"B": 3, "T": 5, "NH": 2, "HS": 8},
         {"B": 2, "T": 17, "NH": 25, "HS": 16}, {"B": 1, "T": 9, "NH": 3, "HS": 64}]


VERSIONS = (("permute", 4), ("permute", 5), ("unpermute", 4))


def cases():
    return emulator_cases(PROJECT, VERSIONS, EXTRA)


def test_the_versions_take_the_trainers_sizes_and_refuse_what_32_bits_cannot_index():
    for number, precision in ((4, "fp32"), (5, "bf16")):
        v = PROJECT.family("permute").version(number)
        assert v.precision == precision
        for NH, HS in ((12, 64), (16, 64), (20, 64), (25, 64)):
            assert not v.unmet({"B": 32, "T": 1024, "NH": NH, "HS": HS})
        assert v.unmet({"B": 256, "T": 4096, "NH": 25, "HS": 64})  # 3N > 2^31
        assert v.unmet({"B": 1, "T": 4, "NH": 2, "HS": 6})           # a head row is not whole units
    v = PROJECT.family("unpermute").version(4)
    assert v.precision == "fp32"
    for NH in (12, 16, 20, 25):
        assert not v.unmet({"B": 32, "T": 1024, "NH": NH, "HS": 64})
    assert v.unmet({"B": 256, "T": 4096, "NH": 32, "HS": 64})  # N = 2^31
    assert v.unmet({"B": 1, "T": 4, "NH": 2, "HS": 6})
    assert sum(c.values[0] == "unpermute" for c in cases()) >= 6


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("family, number, sizes", cases())
def test_on_the_emulator(family, number, sizes):
    v = PROJECT.family(family).version(number)
    for i, bs in enumerate(v.block_sizes):
        reports = runner.emulate(v, sizes, seed=i % 3, block_size=bs, sched="SHUFFLE" if i % 2 else "PRIORITY")
        assert reports and all(r.ok for r in reports), [(bs, r.name, r.bad, r.total) for r in reports if not r.ok]
