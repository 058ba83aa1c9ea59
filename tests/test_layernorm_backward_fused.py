"""layernorm_backward 8 (fp32) and 9 (bf16): versions 5 and 7 with the column-sum reduction folded
into the main kernel ("last block done" tickets), without a GPU.

* the headers: precision, determinism, the sizes they take, the memset of the ticket counters
  before the one kernel, and the team arithmetic (ceil(sqrt(G)) blocks a team, no empty team);
* the kernels on the CPU SIMT emulator (tests/gpu_emu) at every test size each version accepts,
  every block size it lists, two seeds and both schedulers: every output element in tolerance;
* the bits do not depend on which block finishes last: the blocks run in shuffled orders (a
  different block takes each last ticket) and every output is bitwise the same;
* the counters must be zeroed: without the memset step (the scratch holds garbage) it fails.
"""

import dataclasses
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.family import Project

from conftest import FIXTURES, ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

FAMILY = Project(ROOT).family("layernorm_backward")
FUSED = {8: "fp32", 9: "bf16"}
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


@pytest.fixture
def emulate():
    return runner.emulate


def _assert_ok(reports, what=""):
    assert {r.name for r in reports} == {"dinp", "dweight", "dbias"}
    for r in reports:
        assert r.ok, f"{what} {r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


# ---- the headers -------------------------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(FUSED))
def test_the_header(number):
    v = FAMILY.version(number)
    assert v.precision == FUSED[number] and v.deterministic
    assert not v.unmet(FAMILY.default_sizes)
    # one memset of the counters, then one kernel (of two instantiations): no reduce kernel
    assert v.steps[0].kind == "memset" and v.steps[0].name == "tickets"
    assert [s.kind for s in v.steps[1:]] == ["kernel", "kernel"]
    assert all(s.when for s in v.steps[1:]) and "reduce" not in " ".join(v.kernels)
    scratch = {s.name: s.dtype for s in v.scratch}
    assert scratch == {"partial": "f32", "team_sums": "f32", "tickets": "i32"}
    # the same row work, sizes and grid as the version it fuses
    base = FAMILY.version(5 if number == 8 else 7)
    assert v.preconditions == base.preconditions and v.block_sizes == base.block_sizes
    assert v.derived["groups"] == base.derived["groups"]


def test_the_team_arithmetic():
    """team_size = ceil(sqrt(G)) exactly (the float sqrt of an integer below 2^52 is exact enough),
    and cdiv(G, team_size) teams leave none empty: the last team has 1 .. team_size blocks."""
    v = FAMILY.version(8)
    for groups in range(1, 20001):
        env = {"groups": groups}
        team_size = expr.evaluate_int(v.derived["team_size"], env)
        env["team_size"] = team_size
        teams = expr.evaluate_int(v.derived["teams"], env)
        assert team_size == math.isqrt(groups - 1) + 1 == math.ceil(math.sqrt(groups)), groups
        assert (teams - 1) * team_size < groups <= teams * team_size
    assert FAMILY.version(9).derived == v.derived


def test_the_timed_sizes_make_teams_of_about_sqrt_g():
    """At B=8 T=1024 C=768 on an H100 (132 SMs): G = 264, 528, 1056 at blocks of 256, 128, 64."""
    v = FAMILY.version(9)
    got = {}
    for block_size in v.block_sizes:
        env = FAMILY.env(FAMILY.default_sizes, block_size)
        env["SMS"] = 132
        for name in ("groups", "team_size", "teams"):
            env[name] = expr.evaluate_int(v.derived[name], env)
        got[block_size] = (env["groups"], env["team_size"], env["teams"])
    assert got == {64: (1056, 33, 32), 128: (528, 23, 23), 256: (264, 17, 16)}


# ---- on the emulator ---------------------------------------------------------------------------
# Each (size, block size) twice: seed 0 with one warp racing ahead of the others (PRIORITY: a
# missing barrier shows), seed 1 with the warps in step (SHUFFLE).
EMULATED = [(n, sizes, bs, seed) for n in sorted(FUSED) for sizes in FAMILY.test_sizes
            if not FAMILY.version(n).unmet(sizes) for bs in FAMILY.version(n).block_sizes for seed in (0, 1)]


@needs_gxx
@pytest.mark.parametrize("number, sizes, block_size, seed", EMULATED,
                         ids=[f"{n}-{FAMILY.format_sizes(s)}-bs{bs}-seed{seed}" for n, s, bs, seed in EMULATED])
def test_the_kernels_on_the_emulator(emulate, number, sizes, block_size, seed):
    version = FAMILY.version(number)
    reports = emulate(version, sizes, seed=seed, block_size=block_size, mode="LATE",
                      sched="PRIORITY" if seed == 0 else "SHUFFLE")
    _assert_ok(reports)


def test_every_fused_version_is_emulated_at_every_size_it_takes():
    covered = {(n, FAMILY.format_sizes(s)) for n, s, _, _ in EMULATED}
    for n in FUSED:
        v = FAMILY.version(n)
        taken = [s for s in FAMILY.test_sizes if not v.unmet(s)]
        assert len(taken) >= 3
        assert {FAMILY.format_sizes(s) for s in taken} == {f for m, f in covered if m == n}


# N = 600 rows at blocks of 64: G = 300 blocks, teams of 18 (the last one of 12), 17 teams.
ORDER_SIZES = {"B": 2, "T": 300, "C": 1600}


@needs_gxx
@pytest.mark.parametrize("number", sorted(FUSED))
def test_the_bits_do_not_depend_on_which_block_finishes_last(emulate, number):
    version = FAMILY.version(number)
    results = []
    for order in (0, 1, 2):  # index order, then two shuffled orders of the blocks
        outputs = {}
        reports = emulate(version, ORDER_SIZES, seed=0, block_size=64, sched="SHUFFLE",
                          block_order=order, outputs=outputs)
        _assert_ok(reports, f"block order {order}:")
        results.append(outputs)
    for other in results[1:]:
        for name, values in results[0].items():
            assert np.array_equal(values, other[name]), f"{name} changed with the order of the blocks"


@needs_gxx
@pytest.mark.parametrize("number", sorted(FUSED))
def test_without_the_memset_the_counters_hold_garbage_and_it_fails(emulate, number):
    """The emulator's scratch starts as all ones bits (int -1): no block takes a last ticket."""
    version = FAMILY.version(number)
    unzeroed = dataclasses.replace(version, steps=tuple(s for s in version.steps if s.kind != "memset"))
    reports = {r.name: r for r in emulate(unzeroed, {"B": 4, "T": 33, "C": 768}, block_size=128)}
    assert reports["dinp"].ok
    assert not reports["dweight"].ok and not reports["dbias"].ok


# ---- the emulator's block votes ----------------------------------------------------------------
VOTES = """/*
title = "y = alpha x, if the block votes add up"
block_sizes = [128]
[[launch]]
kernel = "scale_votes"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["y", "x", "N", "alpha"]
*/
extern "C" __global__ void scale_votes(float* y, const float* x, int N, float alpha) {
    int t = threadIdx.x, n = blockDim.x, good = 1;
    for (int round = 0; round < 5; round++) {  // back to back: every slot is reused
        good &= __syncthreads_count(t < 5 + round) == 5 + round;
        good &= __syncthreads_or(t == n - 1 - round) == 1;
        good &= __syncthreads_or(0) == 0;
        good &= __syncthreads_and(t != round) == 0;
        good &= __syncthreads_and(1) == 1;
        good &= __syncthreads_count(t % 2 == 0) == n / 2;
    }
    int i = blockIdx.x * n + t;
    if (i < N) y[i] = good ? alpha * x[i] : __int_as_float(0x7fc00000);
}
"""


@needs_gxx
@pytest.mark.parametrize("sched", ["PRIORITY", "SHUFFLE"])
def test_the_emulated_block_votes(tmp_path, sched):
    shutil.copytree(FIXTURES / "project" / "references", tmp_path / "references")
    fam = tmp_path / "kernels" / "scale"
    fam.mkdir(parents=True)
    shutil.copy(FIXTURES / "project" / "kernels" / "scale" / "family.toml", fam)
    (fam / "1_votes.cu").write_text(VOTES)
    version = Project(tmp_path).family("scale").version(1)
    (report,) = runner.emulate(version, {"N": 300}, block_size=128, sched=sched, block_order=3)
    assert report.ok
