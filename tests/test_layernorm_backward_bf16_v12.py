"""layernorm_backward 12 (bf16): version 11's one launch with two rows a warp in flight as 32-bit
words (two buffers taking turns), the weights and the gradients stashed in shared memory, the
block's column sums as float4 atomics, and the last block's rounding in one round trip, without a
GPU.

* the header: bf16, not deterministic, one kernel step per row width (warps_per_row 1, 2 or 3)
  and nothing else (no scratch, no memset, no reduce kernel), the trainer's sizes taken;
* the grid arithmetic: one wave at 12 warps per SM, rounds of equal length, every block some
  rows, the shared memory of an SM's blocks within its 228 KB, the default sizes' grids;
* ptxas: every kernel within the 168 registers that 12 warps per SM leave, no spills;
* the kernels on the CPU SIMT emulator (tests/gpu_emu), every output element against the
  float64 reference at the family's bf16 tolerance: every family test size the version takes at
  every block size (seeds 0-2, both schedulers), and sizes on one multiprocessor where a warp
  has 3 to 10 rows (odd and even counts: both buffers of the loop, the refills, the last round
  ending in either), each row width (1, 2, 3 warps), rows with idle lanes (C = 8, 776);
* the last ticket taken by other blocks (shuffled block orders), and two launches in one process:
  the second finds the accumulator and the counter zeroed by the first's last block.
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
NUMBER = 12
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
SMS = 132  # an H100


def version():
    return FAMILY.version(NUMBER)


def _env(v, sizes, block_size, sms=SMS):
    env = FAMILY.env(sizes, block_size)
    env["SMS"] = sms
    for name, text in v.derived.items():
        env[name] = expr.evaluate(text, env)
    return env


def _assert_ok(reports, what=""):
    assert {r.name for r in reports} == {"dinp", "dweight", "dbias"}
    for r in reports:
        assert r.ok, f"{what} {r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


# ---- the header --------------------------------------------------------------------------------
def test_the_header():
    v = version()
    assert v.precision == "bf16" and not v.deterministic
    assert not v.scratch and all(s.kind == "kernel" for s in v.steps)
    assert [s.when for s in v.steps] == [f"warps_per_row == {w}" for w in (1, 2, 3)]
    assert v.kernels == [f"layernorm_backward{NUMBER}_w{w}" for w in (1, 2, 3)]
    # the trainer's sizes: GPT-2 small to XL, T up to 1024, B up to 32
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 64), (4, 1024), (32, 1024)):
            assert not v.unmet({"B": B, "T": T, "C": C}), (B, T, C)
    assert v.unmet({"B": 1, "T": 2, "C": 4100})
    assert v.unmet({"B": 2, "T": 3, "C": 37})


def test_exactly_one_kernel_runs_at_every_width():
    v = version()
    for C in range(8, 2305, 8):
        env = _env(v, {"B": 1, "T": 1, "C": C}, 128)
        assert sum(bool(expr.evaluate(s.when, env)) for s in v.steps) == 1, C


# ---- the grid ----------------------------------------------------------------------------------
def test_the_grid_is_one_wave_of_equal_rounds():
    """groups <= SMS * blocks_per_sm (12 warps an SM); the kernel's rounds, cdiv(N, groups *
    row_slots), are the header's: no more rounds than a full wave would take; every block has a
    row; the shared memory of an SM's blocks fits (228 KB, 1 KB of it reserved per block)."""
    v = version()
    for sms in (132, 108, 7, 1):
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
    """B=8, T=1024, C=768 on 132 SMs: 6 rounds (3 turns of the two buffers); 342, 228 or 114
    blocks, every warp 6 rows but the last few."""
    v = version()
    got = {bs: (_env(v, FAMILY.default_sizes, bs)["groups"], _env(v, FAMILY.default_sizes, bs)["rounds"])
           for bs in v.block_sizes}
    assert got == {128: (342, 6), 192: (228, 6), 384: (114, 6)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_registers_leave_12_warps_per_sm(nvcc, arch):
    v = version()
    resources, _ = compile_only(v.path, arch)
    for kernel in v.kernels:
        r = resources[kernel]
        assert r.registers <= 168 and not r.spill_stores and not r.spill_loads and not r.stack, (kernel, r.line())


# ---- on the emulator ---------------------------------------------------------------------------
@pytest.fixture
def emulate(monkeypatch):
    def run(sizes, sms, **kw):
        monkeypatch.setattr(runner, "SMS", sms)
        return runner.emulate(version(), sizes, **kw)
    return run


def _family_cases():
    v = version()
    out = []
    for sizes in FAMILY.test_sizes:
        if v.unmet(sizes):
            continue
        for i, bs in enumerate(v.block_sizes):
            out.append(pytest.param(sizes, bs, id=f"{FAMILY.format_sizes(sizes)}-bs{bs}"))
    return out


@needs_gxx
@pytest.mark.parametrize("sizes, block_size", _family_cases())
def test_the_family_sizes_on_the_emulator(emulate, sizes, block_size):
    """132 SMs, as the bench runs them; seed 0 with one warp racing ahead (PRIORITY: a missing
    barrier shows), seeds 1 and 2 with the warps in step."""
    for seed in (0, 1, 2):
        reports = emulate(sizes, SMS, seed=seed, block_size=block_size, sched="PRIORITY" if seed == 0 else "SHUFFLE")
        _assert_ok(reports, f"seed {seed}:")


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
    v = version()
    for sizes, rounds in LONG:
        assert not v.unmet(sizes)
        assert tuple(_env(v, sizes, bs, 1)["rounds"] for bs in v.block_sizes) == rounds, sizes


@needs_gxx
@pytest.mark.parametrize("sizes", [s for s, _ in LONG], ids=[FAMILY.format_sizes(s) for s, _ in LONG])
def test_many_rows_a_warp_on_the_emulator(emulate, sizes):
    v = version()
    for i, bs in enumerate(v.block_sizes):
        seed = i % 3
        reports = emulate(sizes, 1, seed=seed, block_size=bs, sched="PRIORITY" if i % 2 == 0 else "SHUFFLE")
        _assert_ok(reports, f"block {bs} seed {seed}:")


@needs_gxx
@pytest.mark.parametrize("order", [1, 2])
def test_the_last_ticket_taken_by_other_blocks(emulate, order):
    for sizes, bs in (({"B": 4, "T": 33, "C": 768}, 128), ({"B": 1, "T": 7, "C": 1600}, 192)):
        reports = emulate(sizes, SMS, seed=2, block_size=bs, sched="SHUFFLE", block_order=order)
        _assert_ok(reports, f"block order {order}, {sizes}:")


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 4, "T": 33, "C": 768}, {"B": 1, "T": 7, "C": 1600}],
                         ids=["C768", "C1600"])
def test_a_second_launch_finds_the_accumulator_zeroed(sizes):
    """Two launches in one process (module state persists, as on a GPU): the second must add only
    its own totals, and stash the gradients as the first left them. The expected values are the
    reference applied twice (the first result rounded to bf16, as the buffers hold it)."""
    v = version()
    twice = dataclasses.replace(v, steps=v.steps + v.steps)
    first = make_case(FAMILY, sizes, 3, "bf16")
    inputs = dict(first.inputs)
    for name in ("dinp", "dweight", "dbias"):
        inputs[name] = to_storage(first.expected[name].astype(np.float32), "bf16")
    second = run_reference(FAMILY, sizes, inputs, "bf16")
    case = Case(dict(sizes), 3, first.inputs, second, "bf16")
    _assert_ok(runner.emulate(twice, sizes, block_size=192, sched="SHUFFLE", case=case, block_order=1),
               "second launch:")
