"""encoder_forward 8 (fp32): a thread per float4 column of a position, for a group of up to eight
sequences, without a GPU.

* the header: fp32, deterministic, a predicted time, the trainer's sizes accepted (C = 768..1600,
  T <= 1024, B <= 32), block sizes within the kernel's __launch_bounds__, and the launch shape
  its lesson rests on: one thread per (position, group of 8 sequences, float4 column), so at the
  default B = 8 every thread moves the whole batch of its column;
* the kernel on the CPU SIMT emulator (tests/gpu_emu) at every family test size it accepts plus
  sizes that reach every group size 1..8 (the switch's cases), several groups per position
  (B = 13, 17, 23), and rows whose float4 count is not a multiple of 32 (a warp straddles
  positions and groups); every block size the header lists at seeds 0, 1 and 2 each. Every output
  element is checked against the float64 reference at the family's tolerance;
* tokens outside the vocabulary give NaN rows, and only there, in full and partial groups.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

# Beyond the family's test sizes (which give groups of 1, 2, 3 and 4): groups of 5 (13 = 8 + 5),
# 6, 7 (23 = 8 + 8 + 7) and 8; three groups a position; a row of one float4; C / 4 = 196 and 10
# (warps straddle positions and groups).
EXTRA = [{"B": 13, "T": 33, "C": 784, "V": 100}, {"B": 6, "T": 5, "C": 8, "V": 7},
         {"B": 23, "T": 2, "C": 12, "V": 5}, {"B": 8, "T": 3, "C": 4, "V": 3},
         {"B": 17, "T": 9, "C": 40, "V": 13}]
SEEDS = (0, 1, 2)


def version():
    return PROJECT.family("encoder_forward").version(8)


def sizes_accepted():
    v = version()
    return [s for s in [*v.family.test_sizes, *EXTRA] if not v.unmet(s)]


# ---- the header --------------------------------------------------------------------------------
def test_the_header():
    v = version()
    assert v.precision == "fp32" and v.deterministic
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 1), (4, 1024), (8, 1024), (32, 1024), (5, 77)):
            assert not v.unmet({"B": B, "T": T, "C": C, "V": 50257}), (C, B, T)
    assert v.unmet({"B": 2, "T": 3, "C": 37, "V": 5})  # C % 4 != 0 is refused, not mishandled


def test_the_block_sizes_are_within_the_launch_bounds():
    v = version()
    found = re.findall(r"__launch_bounds__\((\d+),\s*(\d+)\)\s*\n?\s*(\w+)\s*\(", v.path.read_text())
    bounds = {kernel: (int(t), int(b)) for t, b, kernel in found}
    max_threads, min_blocks = bounds["encoder_forward8"]
    assert max(v.block_sizes) <= max_threads
    # the header's 1280 threads an SM (48 registers): every listed block size fills them, in at
    # most 32 blocks an SM
    assert max_threads * min_blocks == 1280
    assert all(1280 % bs == 0 and 1280 // bs <= 32 for bs in v.block_sizes)


def test_the_grid_has_a_thread_per_position_group_and_column():
    v = version()
    for sizes in [v.family.default_sizes, {"B": 32, "T": 1024, "C": 768, "V": 50257},
                  {"B": 13, "T": 33, "C": 784, "V": 100}]:
        threads = -(-sizes["B"] // 8) * sizes["T"] * sizes["C"] // 4
        for bs in v.block_sizes:
            env = v.family.env(sizes, bs)
            env["SMS"] = 132
            (step,) = v.steps
            grid = expr.evaluate_int(step.grid[0], env, "grid")
            assert (grid - 1) * bs < threads <= grid * bs, (sizes, bs)
    # at the default sizes one group holds the whole batch: wpe is read once per column
    assert v.family.default_sizes["B"] == 8


# ---- the kernel on the emulator ----------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("sizes", sizes_accepted(), ids=lambda s: version().family.format_sizes(s))
def test_on_the_emulator(sizes):
    v = version()
    for i, bs in enumerate(v.block_sizes):
        for seed in SEEDS:
            sched = "PRIORITY" if (i + seed) % 2 == 0 else "SHUFFLE"
            reports = runner.emulate(v, sizes, seed=seed, block_size=bs, sched=sched)
            assert reports and all(r.ok for r in reports), \
                [(bs, seed, r.name, r.bad, r.total, [m.__dict__ for m in r.first]) for r in reports if not r.ok]


@needs_gxx
def test_tokens_outside_the_vocabulary_give_nan_rows():
    v = version()
    sizes = {"B": 13, "T": 33, "C": 784, "V": 100}  # groups of 8 and 5
    B, T, C, V = sizes["B"], sizes["T"], sizes["C"], sizes["V"]
    case = make_case(v.family, sizes, 0, v.precision)
    tokens = case.inputs["inp"].reshape(-1)
    # first and last of the full group, last of the partial one, and two in one column (t = 1)
    bad = [0 * T + 0, 7 * T + 1, 12 * T + 1, 9 * T + 32, 3 * T + 1]
    tokens[bad] = [-1, V, 1 << 30, -7, -(1 << 31)]
    good = np.setdiff1d(np.arange(tokens.size), bad)
    got = {}
    runner.emulate(v, sizes, seed=0, block_size=v.block_sizes[0], case=case, outputs=got)
    out = np.asarray(got["out"], dtype=np.float64).reshape(tokens.size, C)
    assert np.isnan(out[bad]).all()
    wte = case.inputs["wte"].astype(np.float64).reshape(V, C)
    wpe = case.inputs["wpe"].astype(np.float64).reshape(T, C)
    want = wte[tokens[good]] + wpe[good % T]
    assert np.all(np.abs(out[good] - want) <= 1e-5 + 1e-5 * np.abs(want))
