"""encoder_forward 10 (fp32) and 11 (bf16): version 3's and 5's grids with the ids asked of L2 at
the start and the wpe load issued before the token. On the CPU SIMT emulator (tests/gpu_emu, which
checks the bulk prefetch's range: inside inp, 16-byte units) at every family test size, sizes
with fewer than four ids (no whole 16-byte unit to prefetch) and an id count that is not a
multiple of four, every block size, seeds 0-2; and a token outside the vocabulary writes a NaN
row, only there, although its wpe value was loaded before the token was known."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
VERSIONS = {10: "fp32", 11: "bf16"}
EXTRA = [{"B": 1, "T": 3, "C": 8, "V": 7}, {"B": 3, "T": 5, "C": 16, "V": 100}, {"B": 2, "T": 9, "C": 784, "V": 50}]
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def version(number):
    return PROJECT.family("encoder_forward").version(number)


def cases():
    out = []
    for number in VERSIONS:
        v = version(number)
        for sizes in [*v.family.test_sizes, *EXTRA]:
            if not v.unmet(sizes):
                out.append(pytest.param(number, sizes, id=f"{number}-{v.family.format_sizes(sizes)}"))
    return out


def test_the_headers():
    for number, precision in VERSIONS.items():
        v = version(number)
        assert v.precision == precision and v.deterministic
        assert "Prediction" in v.why
    assert len(cases()) >= 10


@needs_gxx
@pytest.mark.parametrize("number, sizes", cases())
def test_on_the_emulator(number, sizes):
    v = version(number)
    for i, bs in enumerate(v.block_sizes):
        reports = runner.emulate(v, sizes, seed=i % 3, block_size=bs, sched="SHUFFLE" if i % 2 else "PRIORITY")
        assert reports and all(r.ok for r in reports), [(bs, r.name, r.bad, r.total) for r in reports if not r.ok]


@needs_gxx
@pytest.mark.parametrize("number", sorted(VERSIONS))
def test_tokens_outside_the_vocabulary_give_nan_rows(number):
    v = version(number)
    sizes = {"B": 3, "T": 33, "C": 784, "V": 100}
    case = make_case(v.family, sizes, 0, v.precision)
    tokens = case.inputs["inp"].reshape(-1)
    bad = [0, 34, 40, 98]
    tokens[bad] = [-1, 100, 1 << 30, -7]
    good = np.setdiff1d(np.arange(tokens.size), bad)
    got = {}
    runner.emulate(v, sizes, seed=0, block_size=v.block_sizes[0], case=case, outputs=got)
    out = np.asarray(got["out"], dtype=np.float64).reshape(tokens.size, sizes["C"])
    assert np.isnan(out[bad]).all()
    dtype = "f32" if v.precision == "fp32" else "bf16"
    wte = from_storage(case.inputs["wte"], dtype).astype(np.float64).reshape(sizes["V"], sizes["C"])
    wpe = from_storage(case.inputs["wpe"], dtype).astype(np.float64).reshape(sizes["T"], sizes["C"])
    want = wte[tokens[good]] + wpe[good % sizes["T"]]
    tol = 1e-5 if v.precision == "fp32" else 1e-2
    assert np.all(np.abs(out[good] - want) <= tol + tol * np.abs(want))
