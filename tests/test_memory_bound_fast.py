"""encoder_forward 6 (fp32) and 7 (bf16), layernorm_forward 10 (bf16), fused_residual_forward 6
(bf16): the memory-bound versions built to close the last few percent to a copy's speed, without
a GPU.

* the headers: precision, determinism, the trainer's sizes accepted (C = 768..1600, T <= 1024,
  B <= 32), and the launch shape their lesson rests on: at the default sizes every grid is one
  resident wave (the blocks fit in the threads an SM that the kernel's __launch_bounds__
  guarantee), and each warp gets the rows the header says it does;
* the kernels on the CPU SIMT emulator (tests/gpu_emu) at every family test size each version
  accepts plus sizes that reach each instantiation, partial chunks, odd B (encoder 7's pairs) and
  C past a chunk; every block size the header lists; seeds 0-2; both schedulers; and two
  multiprocessor counts: 132 (an H100: the small test sizes give a warp one or two rows) and 1
  (the persistent loops run many passes, so the prefetched rows and tokens are exercised).
  Every output element is checked against the float64 reference at the family's tolerance;
* encoder_forward 6 and 7 write NaN rows for tokens outside the vocabulary, and only there.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT, emulator_cases

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
NEW = {("encoder_forward", 6): "fp32", ("encoder_forward", 7): "bf16",
       ("layernorm_forward", 10): "bf16", ("fused_residual_forward", 6): "bf16"}
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

# Beyond the family's test sizes: each instantiation (C <= 768, <= 1024, <= 2048), rows that end
# inside a chunk, odd B (encoder 7 pairs sequences b and b + 1), and C past one chunk.
EXTRA = {
    "encoder_forward": [{"B": 5, "T": 33, "C": 784, "V": 100}, {"B": 3, "T": 5, "C": 8, "V": 7},
                        {"B": 2, "T": 2, "C": 4104, "V": 3}],
    "layernorm_forward": [{"B": 3, "T": 5, "C": 8}, {"B": 7, "T": 33, "C": 760}, {"B": 5, "T": 33, "C": 776},
                          {"B": 2, "T": 37, "C": 1024}, {"B": 2, "T": 9, "C": 2048}],
}
EXTRA["fused_residual_forward"] = EXTRA["layernorm_forward"]



def version(name, number):
    return PROJECT.family(name).version(number)


def cases():
    return emulator_cases(PROJECT, NEW, EXTRA)


@pytest.fixture
def emulate(monkeypatch):
    def run(v, sizes, sms, **kw):
        monkeypatch.setattr(runner, "SMS", sms)
        return runner.emulate(v, sizes, **kw)
    return run


# ---- the headers -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, number", sorted(NEW))
def test_the_header(name, number):
    v = version(name, number)
    assert v.precision == NEW[(name, number)] and v.deterministic
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 1), (4, 1024), (8, 1024), (32, 1024), (5, 77)):
            sizes = {"B": B, "T": T, "C": C, "V": 50257}
            assert not v.unmet({k: sizes[k] for k in v.family.sizes}), (C, B, T)


def _bounds(source: str) -> dict[str, tuple[int, int]]:
    """kernel name -> (__launch_bounds__ max threads, min blocks)."""
    found = re.findall(r"__launch_bounds__\((\d+),\s*(\d+)\)\s*\n?\s*(\w+)\s*\(", source)
    return {kernel: (int(t), int(b)) for t, b, kernel in found}


@pytest.mark.parametrize("name, number", sorted(NEW))
def test_at_the_default_sizes_the_grid_is_one_resident_wave(name, number):
    """The grid never asks for more blocks than the launch bounds guarantee resident (else a
    second, mostly empty wave would run after the first), and at the default sizes it fills
    at least 90% of them."""
    v = version(name, number)
    bounds = _bounds(v.path.read_text())
    sizes = v.family.default_sizes
    for bs in v.block_sizes:
        env = v.family.env(sizes, bs)
        env["SMS"] = 132
        steps = [s for s in v.steps if s.when is None or expr.evaluate(s.when, env)]
        assert len(steps) == 1
        step = steps[0]
        max_threads, min_blocks = bounds[step.name]
        assert bs <= max_threads
        resident = 132 * (max_threads * min_blocks // bs)
        grid = expr.evaluate_int(step.grid[0], env, "grid")
        assert 0.9 * resident <= grid <= resident, (bs, grid, resident)
        # block 64 at 1024 threads an SM is 16 blocks: under the 32-block limit of an SM
        assert max_threads * min_blocks // bs <= 32


def test_at_the_default_sizes_the_two_row_versions_give_every_warp_exactly_two_rows():
    """layernorm 10 and encoder 7 (a pair per warp) at 8x1024x768: 4096 warps, all of the input
    requested by the first loads."""
    for name, number in (("layernorm_forward", 10), ("encoder_forward", 7)):
        v = version(name, number)
        for bs in v.block_sizes:
            env = v.family.env(v.family.default_sizes, bs)
            env["SMS"] = 132
            step = next(s for s in v.steps if s.when is None or expr.evaluate(s.when, env))
            assert expr.evaluate_int(step.grid[0], env, "grid") * (bs // 32) == 4096, (name, bs)


# ---- the kernels on the emulator ---------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("name, number, sizes", cases())
def test_on_the_emulator(emulate, name, number, sizes):
    v = version(name, number)
    for i, bs in enumerate(v.block_sizes):
        seed = i % 3  # every version lists at least three block sizes: seeds 0, 1 and 2
        # even: one multiprocessor (long persistent loops) with one warp racing ahead of the
        # others (a missing barrier shows); odd: an H100's 132 with the warps in step
        sms, sched = (1, "PRIORITY") if i % 2 == 0 else (132, "SHUFFLE")
        reports = emulate(v, sizes, sms, seed=seed, block_size=bs, sched=sched)
        assert reports and all(r.ok for r in reports), \
            [(bs, seed, sms, r.name, r.bad, r.total, [m.__dict__ for m in r.first]) for r in reports if not r.ok]


@needs_gxx
@pytest.mark.parametrize("number", [6, 7, 10, 11, 12, 13, 14])  # 10-12 load wpe before the token is known; 13-14 skip the bad rows' copies
def test_encoder_tokens_outside_the_vocabulary_give_nan_rows(emulate, number):
    v = version("encoder_forward", number)
    sizes = {"B": 3, "T": 33, "C": 784, "V": 100}
    case = make_case(v.family, sizes, 0, v.precision)
    tokens = case.inputs["inp"].reshape(-1)
    bad = [0, 34, 40, 98]  # both rows of a pair (t = 1), and the unpaired third sequence
    tokens[bad] = [-1, 100, 1 << 30, -7]
    good = np.setdiff1d(np.arange(tokens.size), bad)
    got = {}
    emulate(v, sizes, 1, seed=0, block_size=v.block_sizes[0], case=case, outputs=got)
    out = np.asarray(got["out"], dtype=np.float64).reshape(tokens.size, sizes["C"])
    assert np.isnan(out[bad]).all()
    dtype = "f32" if v.precision == "fp32" else "bf16"
    wte = from_storage(case.inputs["wte"], dtype).astype(np.float64).reshape(sizes["V"], sizes["C"])
    wpe = from_storage(case.inputs["wpe"], dtype).astype(np.float64).reshape(sizes["T"], sizes["C"])
    want = wte[tokens[good]] + wpe[good % sizes["T"]]
    tol = 1e-5 if v.precision == "fp32" else 1e-2
    assert np.all(np.abs(out[good] - want) <= tol + tol * np.abs(want))
