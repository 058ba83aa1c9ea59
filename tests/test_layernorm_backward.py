"""The layernorm_backward family's later versions, without a GPU. Each runs on the CPU SIMT emulator
(tests/gpu_emu) as its header's [[emulate]] tables say (tests/test_emulator.py: every family test
size it takes, every block size, seeds and both schedulers; shuffled block orders, so that other
blocks take the last ticket; version 12 on one multiprocessor too, where a warp has 3 to 10 rows).
Here:

* 8 (fp32) and 9 (bf16): versions 5 and 7 with the column-sum reduction folded into the main
  kernel ("last block done" tickets): the headers (precision, determinism, the sizes they take, the
  memset of the ticket counters before the one kernel), the team arithmetic (ceil(sqrt(G)) blocks
  a team, no empty team); the bits do not depend on which block finishes last (the blocks run in
  shuffled orders and every output is bitwise the same); without the memset (the scratch holds
  garbage) it fails;
* 10 (fp32) and 11 (bf16): one launch, the rows and their column sums in registers, float atomics
  for dweight and dbias (bf16: into a module-level fp32 accumulator that the last block rounds into
  the gradients and zeroes); 12 (bf16): version 11 with two rows a warp in flight as 32-bit words
  (two buffers taking turns), the weights and the gradients stashed in shared memory, the block's
  column sums as float4 atomics, the last block's rounding in one round trip. The headers
  (precision, not deterministic, one kernel step per row width, warps_per_row 1, 2 or 3, and
  nothing else, the trainer's sizes taken); the grid arithmetic (one wave at 12 warps per SM,
  rounds of equal length, every block some rows, the shared memory of an SM's blocks within its
  228 KB, the default sizes' grids); ptxas (every kernel within the 168 registers that 12 warps
  per SM leave, no spills); two launches in one process (bf16: the second finds the accumulator
  and the counter zeroed by the first's last block);
* bf16: dweight's sum over N rows rounded once passes the tolerance, a bf16 running sum fails.

Its NumPy reference (at the end): against PyTorch's autograd in float64 plus the gradients it
accumulates into, and against finite differences; prepare's statistics; the PyTorch helper timed
beside it; the case's float32 statistics; a test size at GPT-2 XL's width. The tests that call
PyTorch skip themselves where it is not installed.
"""

import dataclasses
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from references.layernorm_backward import layernorm_backward, prepare, torch_layernorm_backward
from references.layernorm_forward import layernorm_forward
from workbench import expr
from workbench.check import Case, compare, from_storage, make_case, run_reference, to_storage
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, ROW_SHAPES, needs_torch, t

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


FAMILY = Project(ROOT).family("layernorm_backward")
FUSED = {8: "fp32", 9: "bf16"}
FAST = {10: "fp32", 11: "bf16"}
V12 = 12
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
SMS = 132  # an H100


def _env(version, sizes, block_size, sms=SMS):
    env = FAMILY.env(sizes, block_size)
    env["SMS"] = sms
    for name, text in version.derived.items():
        env[name] = expr.evaluate(text, env)
    return env


def _assert_ok(reports, what=""):
    assert {r.name for r in reports} == {"dinp", "dweight", "dbias"}
    for r in reports:
        assert r.ok, f"{what} {r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


# ---- 8 and 9: the reduction fused -------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(FUSED))
def test_the_fused_headers(number):
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


def test_every_fused_version_is_emulated_at_every_size_it_takes():
    for n in FUSED:
        v = FAMILY.version(n)
        taken = [s for s in FAMILY.test_sizes if not v.unmet(s)]
        assert len(taken) >= 3
        assert {FAMILY.format_sizes(s) for s in taken} == {FAMILY.format_sizes(s) for s, _ in runner.cases(v)}


# N = 600 rows at blocks of 64: G = 300 blocks, teams of 18 (the last one of 12), 17 teams.
ORDER_SIZES = {"B": 2, "T": 300, "C": 1600}


@needs_gxx
@pytest.mark.parametrize("number", sorted(FUSED))
def test_the_bits_do_not_depend_on_which_block_finishes_last(number):
    version = FAMILY.version(number)
    results = []
    for order in (0, 1, 2):  # index order, then two shuffled orders of the blocks
        outputs = {}
        reports = runner.emulate(version, ORDER_SIZES, seed=0, block_size=64, sched="SHUFFLE",
                          block_order=order, outputs=outputs)
        _assert_ok(reports, f"block order {order}:")
        results.append(outputs)
    for other in results[1:]:
        for name, values in results[0].items():
            assert np.array_equal(values, other[name]), f"{name} changed with the order of the blocks"


@needs_gxx
@pytest.mark.parametrize("number", sorted(FUSED))
def test_without_the_memset_the_counters_hold_garbage_and_it_fails(number):
    """The emulator's scratch starts as all ones bits (int -1): no block takes a last ticket."""
    version = FAMILY.version(number)
    unzeroed = dataclasses.replace(version, steps=tuple(s for s in version.steps if s.kind != "memset"))
    reports = {r.name: r for r in runner.emulate(unzeroed, {"B": 4, "T": 33, "C": 768}, block_size=128)}
    assert reports["dinp"].ok
    assert not reports["dweight"].ok and not reports["dbias"].ok


# ---- 10 and 11: one launch --------------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(FAST))
def test_the_one_launch_headers(number):
    v = FAMILY.version(number)
    assert v.precision == FAST[number] and not v.deterministic
    assert not v.scratch and all(s.kind == "kernel" for s in v.steps)
    assert [s.when for s in v.steps] == [f"warps_per_row == {w}" for w in (1, 2, 3)]
    assert v.kernels == [f"layernorm_backward{number}_w{w}" for w in (1, 2, 3)]
    # the trainer's sizes: GPT-2 small to XL, T up to 1024, B up to 32
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 64), (4, 1024), (32, 1024)):
            assert not v.unmet({"B": B, "T": T, "C": C}), (B, T, C)
    assert v.unmet({"B": 1, "T": 2, "C": 4100})


@pytest.mark.parametrize("number", sorted(FAST))
def test_exactly_one_kernel_runs_at_every_width(number):
    v = FAMILY.version(number)
    for C in range(8, 2305, 8):
        env = _env(v, {"B": 1, "T": 1, "C": C}, 128)
        assert sum(bool(expr.evaluate(s.when, env)) for s in v.steps) == 1, C


# ---- the grid ----------------------------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(FAST))
def test_the_grid_is_one_wave_of_equal_rounds(number):
    """groups <= SMS * blocks_per_sm (12 warps an SM); the kernel's rounds, cdiv(N, groups *
    row_slots), are the header's: no more rounds than a full wave would take; every block has a
    row; the shared memory of an SM's blocks fits (228 KB, 1 KB of it reserved per block)."""
    assert_one_wave_of_equal_rounds(FAMILY.version(number), (132, 108, 7))


def assert_one_wave_of_equal_rounds(v, sm_counts):
    for sms in sm_counts:
        for C in (8, 768, 776, 1536, 1600, 2304):
            for N in (1, 5, 131, 1584, 3003, 8192, 8193, 32768):
                for bs in v.block_sizes:
                    env = _env(v, {"B": 1, "T": N, "C": C}, bs, sms)
                    warps, slots, groups = bs // 32, env["row_slots"], env["groups"]
                    assert slots >= 1 and env["blocks_per_sm"] * warps == 12
                    assert groups <= sms * env["blocks_per_sm"]
                    full_wave_rounds = -(-N // (sms * env["blocks_per_sm"] * slots))
                    assert -(-N // (groups * slots)) == env["rounds"] == full_wave_rounds
                    assert (groups - 1) * slots < N  # the last block's first row exists
                    shared = expr.evaluate_int(v.steps[0].shared, env)
                    assert shared * env["blocks_per_sm"] <= 228 * 1024 - 1024 * env["blocks_per_sm"]


def test_the_default_sizes_grids():
    """B=8, T=1024, C=768 on 132 SMs: 6 rounds; 342, 228 or 114 blocks (every warp 6 rows but
    the last few), not 396/264/132 blocks of 5.17 rows."""
    for number in FAST:
        v = FAMILY.version(number)
        got = {bs: (_env(v, FAMILY.default_sizes, bs)["groups"], _env(v, FAMILY.default_sizes, bs)["rounds"])
               for bs in v.block_sizes}
        assert got == {128: (342, 6), 192: (228, 6), 384: (114, 6)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("number", sorted(FAST))
def test_the_registers_leave_12_warps_per_sm(nvcc, number, arch):
    resources, _ = compile_only(FAMILY.version(number).path, arch)
    for kernel in FAMILY.version(number).kernels:
        r = resources[kernel]
        assert r.registers <= 168 and not r.spill_stores and not r.spill_loads and not r.stack, (kernel, r.line())


def test_every_size_each_version_takes_is_emulated():
    for n in FAST:
        v = FAMILY.version(n)
        taken = {FAMILY.format_sizes(s) for s in FAMILY.test_sizes if not v.unmet(s)}
        assert len(taken) >= 3
        assert taken == {FAMILY.format_sizes(s) for s, _ in runner.cases(v)}
        # the wide rows (two and three warps a row) are among them
        assert {s["C"] for s in FAMILY.test_sizes if not v.unmet(s)} >= {768, 1600}


@needs_gxx
@pytest.mark.parametrize("number", [11, V12])
@pytest.mark.parametrize("sizes", [{"B": 4, "T": 33, "C": 768}, {"B": 1, "T": 7, "C": 1600}],
                         ids=["C768", "C1600"])
def test_versions_11_and_12_a_second_launch_finds_the_accumulator_zeroed(number, sizes):
    """Two launches in one process (module state persists, as on a GPU): the second must add only
    its own totals. The expected values are the reference applied twice (the first result
    rounded to bf16, as the buffers hold it)."""
    version = FAMILY.version(number)
    twice = dataclasses.replace(version, steps=version.steps + version.steps)
    first = make_case(FAMILY, sizes, 3, "bf16")
    inputs = dict(first.inputs)
    for name in ("dinp", "dweight", "dbias"):
        inputs[name] = to_storage(first.expected[name].astype(np.float32), "bf16")
    second = run_reference(FAMILY, sizes, inputs, "bf16")
    case = Case(dict(sizes), 3, first.inputs, second, "bf16")
    _assert_ok(runner.emulate(twice, sizes, block_size=192, sched="SHUFFLE", case=case, block_order=1),
               "second launch:")


# ---- 12: two rows a warp in flight ---------------------------------------------------------------
def test_version_12s_header():
    v = FAMILY.version(V12)
    assert v.precision == "bf16" and not v.deterministic
    assert not v.scratch and all(s.kind == "kernel" for s in v.steps)
    assert [s.when for s in v.steps] == [f"warps_per_row == {w}" for w in (1, 2, 3)]
    assert v.kernels == [f"layernorm_backward{V12}_w{w}" for w in (1, 2, 3)]
    # the trainer's sizes: GPT-2 small to XL, T up to 1024, B up to 32
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 64), (4, 1024), (32, 1024)):
            assert not v.unmet({"B": B, "T": T, "C": C}), (B, T, C)
    assert v.unmet({"B": 1, "T": 2, "C": 4100})
    assert v.unmet({"B": 2, "T": 3, "C": 37})


def test_version_12_runs_exactly_one_kernel_at_every_width():
    v = FAMILY.version(V12)
    for C in range(8, 2305, 8):
        env = _env(v, {"B": 1, "T": 1, "C": C}, 128)
        assert sum(bool(expr.evaluate(s.when, env)) for s in v.steps) == 1, C


def test_version_12s_grid_is_one_wave_of_equal_rounds():
    """groups <= SMS * blocks_per_sm (12 warps an SM); the kernel's rounds, cdiv(N, groups *
    row_slots), are the header's: no more rounds than a full wave would take; every block has a
    row; the shared memory of an SM's blocks fits (228 KB, 1 KB of it reserved per block)."""
    assert_one_wave_of_equal_rounds(FAMILY.version(V12), (132, 108, 7, 1))


def test_version_12s_default_sizes_grids():
    """B=8, T=1024, C=768 on 132 SMs: 6 rounds (3 turns of the two buffers); 342, 228 or 114
    blocks, every warp 6 rows but the last few."""
    v = FAMILY.version(V12)
    got = {bs: (_env(v, FAMILY.default_sizes, bs)["groups"], _env(v, FAMILY.default_sizes, bs)["rounds"])
           for bs in v.block_sizes}
    assert got == {128: (342, 6), 192: (228, 6), 384: (114, 6)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_version_12s_registers_leave_12_warps_per_sm(nvcc, arch):
    v = FAMILY.version(V12)
    resources, _ = compile_only(v.path, arch)
    for kernel in v.kernels:
        r = resources[kernel]
        assert r.registers <= 168 and not r.spill_stores and not r.spill_loads and not r.stack, (kernel, r.line())


# One multiprocessor: the grid is 1-3 blocks and each warp loops over several rows. (sizes, the
# rounds at block sizes 128, 192, 384)
LONG = [
    ({"B": 1, "T": 37, "C": 768}, (4, 4, 4)),    # one warp a row; even: the last round in b
    ({"B": 1, "T": 25, "C": 776}, (5, 5, 5)),    # two warps a row, idle lanes; odd: ends in a
    ({"B": 1, "T": 31, "C": 1536}, (6, 6, 6)),   # two warps a row, full; even
    ({"B": 1, "T": 25, "C": 2304}, (9, 7, 7)),   # three warps a row, full; a leftover warp at 128
    ({"B": 3, "T": 9, "C": 8}, (3, 3, 3)),       # one pack a row: 31 idle lanes; odd
]


def test_the_long_sizes_give_the_rounds_they_say():
    v = FAMILY.version(V12)
    for sizes, rounds in LONG:
        assert not v.unmet(sizes) and sizes in [s for t in v.emulate for s in t.sizes]
        assert tuple(_env(v, sizes, bs, 1)["rounds"] for bs in v.block_sizes) == rounds, sizes


# ---- bf16 ----------------------------------------------------------------------------------------
def test_one_rounding_passes_the_bf16_tolerance_and_a_truncation_of_the_sum_of_columns_does_not():
    """dweight's sum over N rows, rounded once at the end, passes; a bf16 running sum fails."""
    fam = FAMILY
    sizes = {"B": 4, "T": 256, "C": 64}
    case = make_case(fam, sizes, 0, "bf16")
    arg = next(a for a in fam.args_for("bf16") if a.name == "dbias")
    dout = from_storage(case.inputs["dout"], "bf16").reshape(-1, sizes["C"])
    start = from_storage(case.inputs["dbias"], "bf16")
    once = from_storage(to_storage((start + dout.astype(np.float32).sum(0)).astype(np.float32), "bf16"), "bf16")
    assert compare(arg, case.expected["dbias"], once, *fam.tolerance(arg, "bf16")).ok
    running = start.copy()
    for row in dout:
        running = from_storage(to_storage(running + row, "bf16"), "bf16")
    assert not compare(arg, case.expected["dbias"], running, *fam.tolerance(arg, "bf16")).ok


# -- the reference ---------------------------------------------------------------------------------
def _ln_case(shape, seed):
    rng = np.random.default_rng(seed)
    C = shape[-1]
    inp, dout = rng.normal(0.5, 2, size=shape), rng.normal(size=shape)
    w, bias = rng.normal(1, 0.1, size=C), rng.normal(0, 0.1, size=C)
    grads0 = rng.normal(size=shape), rng.normal(size=C), rng.normal(size=C)
    return inp, dout, w, bias, grads0


@needs_torch
@pytest.mark.parametrize("shape", ROW_SHAPES + [(3, 2, 5)])
def test_layernorm_backward_matches_autograd_plus_the_initial_gradients(shape):
    inp, dout, w, bias, (dinp0, dw0, db0) = _ln_case(shape, 9)
    stats = prepare(inp)
    ref = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    x, wt, bt = t(inp).requires_grad_(), t(w).requires_grad_(), t(bias).requires_grad_()
    F.layer_norm(x, (shape[-1],), wt, bt, 1e-5).backward(t(dout))
    np.testing.assert_allclose(ref["dinp"] - dinp0, x.grad.numpy(), atol=1e-10, rtol=1e-9)
    np.testing.assert_allclose(ref["dweight"] - dw0, wt.grad.numpy(), atol=1e-10, rtol=1e-9)
    np.testing.assert_allclose(ref["dbias"] - db0, bt.grad.numpy(), atol=1e-10, rtol=1e-9)


def test_layernorm_backward_accumulates_rather_than_overwrites():
    inp, dout, w, _, (dinp0, dw0, db0) = _ln_case((2, 3, 7), 10)
    stats = prepare(inp)
    zero = layernorm_backward(0 * dinp0, 0 * dw0, 0 * db0, dout, inp, w, stats["mean"], stats["rstd"])
    acc = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    for name, initial in (("dinp", dinp0), ("dweight", dw0), ("dbias", db0)):
        np.testing.assert_allclose(acc[name], zero[name] + initial, rtol=1e-14, atol=1e-14)


def test_layernorm_backward_matches_finite_differences():
    inp, dout, w, bias, _ = _ln_case((2, 2, 5), 11)
    C = inp.shape[-1]
    stats = prepare(inp)
    ref = layernorm_backward(np.zeros_like(inp), np.zeros(C), np.zeros(C), dout, inp, w,
                             stats["mean"], stats["rstd"])

    def loss(x, wt, b):  # mean and rstd are recomputed from x: dinp includes their gradient
        return float((layernorm_forward(x, wt, b)["out"] * dout).sum())

    h = 1e-6
    params = [inp, w, bias]
    for pos, name in enumerate(("dinp", "dweight", "dbias")):
        fd = np.zeros_like(params[pos])
        for idx in np.ndindex(fd.shape):
            up, down = list(params), list(params)
            up[pos], down[pos] = params[pos].copy(), params[pos].copy()
            up[pos][idx] += h
            down[pos][idx] -= h
            fd[idx] = (loss(*up) - loss(*down)) / (2 * h)
        np.testing.assert_allclose(ref[name], fd, atol=1e-6, rtol=1e-5, err_msg=name)


def test_prepare_gives_the_forwards_mean_and_rstd():
    inp = np.random.default_rng(12).normal(0.5, 2, size=(2, 3, 37))
    stats, fwd = prepare(inp), layernorm_forward(inp, np.ones(37), np.zeros(37))
    np.testing.assert_allclose(stats["mean"], fwd["mean"], rtol=1e-14)
    np.testing.assert_allclose(stats["rstd"], fwd["rstd"], rtol=1e-14)


@needs_torch
def test_torch_layernorm_backward_helper_matches_the_reference():
    inp, dout, w, _, (dinp0, dw0, db0) = _ln_case((2, 3, 37), 13)
    stats = prepare(inp)
    ref = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    got = torch_layernorm_backward(t(dinp0), t(dw0), t(db0), t(dout), t(inp), t(w),
                                   t(stats["mean"]), t(stats["rstd"]))
    for name, value in zip(["dinp", "dweight", "dbias"], got):
        np.testing.assert_allclose(value.numpy(), ref[name], atol=1e-10, rtol=1e-9, err_msg=name)


def test_layernorm_backward_case_feeds_the_reference_float32_statistics_of_its_own_inp():
    fam = Project(ROOT).family("layernorm_backward")
    case = make_case(fam, {"B": 2, "T": 3, "C": 37}, seed=0)
    assert case.inputs["mean"].dtype == np.float32
    x = case.inputs["inp"].astype(np.float64)
    np.testing.assert_allclose(case.inputs["mean"], x.mean(-1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(case.inputs["rstd"], 1 / np.sqrt(x.var(-1) + 1e-5), rtol=1e-6)


def test_layernorm_backward_is_tested_at_gpt2_xl_width():
    fam = Project(ROOT).family("layernorm_backward")
    assert any(s["C"] == 1600 for s in fam.test_sizes)
