"""encoder_forward 10 (fp32) and 11 (bf16): version 3's and 5's grids with the ids asked of L2 at
the start and the wpe load issued before the token; 12 (fp32): version 10 with two float4 a
thread, a grid's width apart (the second item's bounds are what can go wrong). On the CPU SIMT emulator (tests/gpu_emu, which
checks the bulk prefetch's range: inside inp, 16-byte units) at every family test size, sizes
with fewer than four ids (no whole 16-byte unit to prefetch) and an id count that is not a
multiple of four, every block size, seeds 0-2. That a token outside the vocabulary writes a NaN
row, only there, although its wpe value was loaded before the token was known, is tested beside
versions 6 and 7 (test_memory_bound_fast.py)."""

import shutil
import sys
from pathlib import Path

import pytest

from workbench.family import Project

from conftest import ROOT, emulator_cases

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
VERSIONS = {10: "fp32", 11: "bf16", 12: "fp32"}
EXTRA = [{"B": 1, "T": 3, "C": 8, "V": 7}, {"B": 3, "T": 5, "C": 16, "V": 100}, {"B": 2, "T": 9, "C": 784, "V": 50}]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def version(number):
    return PROJECT.family("encoder_forward").version(number)


def cases():
    return emulator_cases(PROJECT, [("encoder_forward", n) for n in VERSIONS], EXTRA)


def test_the_headers():
    for number, precision in VERSIONS.items():
        v = version(number)
        assert v.precision == precision and v.deterministic
        assert ("Prediction" if number < 12 else "Measured") in v.why
    assert len(cases()) >= 10


@needs_gxx
@pytest.mark.parametrize("family, number, sizes", cases())
def test_on_the_emulator(family, number, sizes):
    v = version(number)
    for i, bs in enumerate(v.block_sizes):
        reports = runner.emulate(v, sizes, seed=i % 3, block_size=bs, sched="SHUFFLE" if i % 2 else "PRIORITY")
        assert reports and all(r.ok for r in reports), [(bs, r.name, r.bad, r.total) for r in reports if not r.ok]
