"""layernorm_backward 10 (fp32) and 11 (bf16): one launch, the rows and their column sums in
registers, float atomics for dweight and dbias (bf16: into a module-level fp32 accumulator that
the last block rounds into the gradients and zeroes), without a GPU.

* the headers: precision, not deterministic, one kernel step per row width (warps_per_row 1, 2
  or 3) and nothing else (no scratch, no memset, no reduce kernel), the trainer's sizes taken;
* the grid arithmetic: one wave at 12 warps per SM, rounds of equal length, every block some
  rows, shared memory within an SM, the default sizes' grids;
* ptxas: every kernel within the 168 registers that 12 warps per SM leave, no spills;
* the kernels on the CPU SIMT emulator (tests/gpu_emu) at every test size each version takes:
  every block size, two seeds and both schedulers at the small sizes, one block size each at
  the large ones (seconds each): every output element in tolerance;
* bf16: the last ticket taken by other blocks (shuffled block orders), and two launches in one
  process: the second finds the accumulator and the counter zeroed by the first's last block.
"""

import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import Case, make_case, run_reference, to_storage
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

FAMILY = Project(ROOT).family("layernorm_backward")
FAST = {10: "fp32", 11: "bf16"}
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


# ---- the headers -------------------------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(FAST))
def test_the_header(number):
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
    row; the shared memory of an SM's blocks fits (228 KB)."""
    v = FAMILY.version(number)
    for sms in (132, 108, 7):
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


# ---- on the emulator ---------------------------------------------------------------------------
def _emulated():
    cases = []
    for n in sorted(FAST):
        v = FAMILY.version(n)
        for sizes in FAMILY.test_sizes:
            if v.unmet(sizes):
                continue
            if sizes["B"] * sizes["T"] * sizes["C"] > 250_000:  # seconds each: one block size, one seed
                cases.append((n, sizes, v.block_sizes[len(cases) % len(v.block_sizes)], 0))
                continue
            # seed 0: one warp races ahead (PRIORITY: a missing barrier shows); 1: warps in step
            cases += [(n, sizes, bs, seed) for seed in (0, 1) for bs in v.block_sizes]
    return cases


EMULATED = _emulated()


@needs_gxx
@pytest.mark.parametrize("number, sizes, block_size, seed", EMULATED,
                         ids=[f"{n}-{FAMILY.format_sizes(s)}-bs{bs}-seed{seed}" for n, s, bs, seed in EMULATED])
def test_the_kernels_on_the_emulator(number, sizes, block_size, seed):
    version = FAMILY.version(number)
    reports = runner.emulate(version, sizes, seed=seed, block_size=block_size,
                             sched="PRIORITY" if seed == 0 else "SHUFFLE")
    _assert_ok(reports)


def test_every_size_each_version_takes_is_emulated():
    for n in FAST:
        v = FAMILY.version(n)
        taken = {FAMILY.format_sizes(s) for s in FAMILY.test_sizes if not v.unmet(s)}
        assert len(taken) >= 3
        assert taken == {FAMILY.format_sizes(s) for m, s, _, _ in EMULATED if m == n}
        # the wide rows (two and three warps a row) are among them
        assert {s["C"] for s in FAMILY.test_sizes if not v.unmet(s)} >= {768, 1600}


@needs_gxx
@pytest.mark.parametrize("order", [1, 2])
def test_bf16_the_last_ticket_taken_by_other_blocks(order):
    reports = runner.emulate(FAMILY.version(11), {"B": 4, "T": 33, "C": 768}, seed=2, block_size=128,
                             sched="SHUFFLE", block_order=order)
    _assert_ok(reports, f"block order {order}:")


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 4, "T": 33, "C": 768}, {"B": 1, "T": 7, "C": 1600}],
                         ids=["C768", "C1600"])
def test_bf16_a_second_launch_finds_the_accumulator_zeroed(sizes):
    """Two launches in one process (module state persists, as on a GPU): the second must add only
    its own totals. The expected values are the reference applied twice (the first result
    rounded to bf16, as the buffers hold it)."""
    version = FAMILY.version(11)
    twice = dataclasses.replace(version, steps=version.steps + version.steps)
    first = make_case(FAMILY, sizes, 3, "bf16")
    inputs = dict(first.inputs)
    for name in ("dinp", "dweight", "dbias"):
        inputs[name] = to_storage(first.expected[name].astype(np.float32), "bf16")
    second = run_reference(FAMILY, sizes, inputs, "bf16")
    case = Case(dict(sizes), 3, first.inputs, second, "bf16")
    _assert_ok(runner.emulate(twice, sizes, block_size=192, sched="SHUFFLE", case=case, block_order=1),
               "second launch:")
