"""The encoder_backward family, without a GPU: its token-partition versions (5: fp32, 6: bf16), its
one-pass versions (7: fp32, vector atomics into dwte; 10: the same with the dwte chunks prefetched
to L2; 8: bf16, no atomics, kernels/encoder_backward/encoder_backward_fast.cuh; 9: version 8 with its first
dout rows bulk-copied into shared memory, the header's DOUT path; 11: version 8 with the dwte and
dwpe chunks it updates bulk-copied into shared memory, ROWS), and the plan made on the host
(references/encoder_backward.py) that version 12 follows.

Every version's own cases on the CPU SIMT emulator (tests/gpu_emu) are its header's [[emulate]]
tables (tests/test_emulator.py: every test size the version takes, several seeds, block sizes,
schedulers and block orders). Here:

* the headers: precision, determinism, one kernel launch and no scratch at every size (versions
  5-11), shared memory within an SM's at every block size up to the sizes the precondition allows
  (8, 9, 11);
* the partition versions' bits: the same at every block size with warps in step (SHUFFLE) or not
  (the sum order is set by the data alone), and the paths for positions that do not fit in shared
  memory (windows of tokens and streamed tokens, forced with a small capacity) give the same bits
  as the path that holds them all; a skewed batch (one token holding most positions), as real text
  has; the bits against a float32 NumPy model of the header's formula (a token's rows in position
  order, dealt to 8 running sums when more than 8, the sums added in order, the total added to the
  gradient row; bf16: widened, and rounded once at the end): equal, bit for bit. Their warp votes
  (__ballot_sync, __match_any_sync, an int __shfl_up_sync, __popc) are emu.h's;
* the one-pass versions: skewed batches, groups of exactly 8 and 9 positions (the two sides of
  version 8's short and long paths), a batch wide enough that a block owns fewer units than it has
  threads; version 8's bits equal to a float32 NumPy model of its header's formula (bf16: rounded
  once), and the header at fp32 (a twin of version 8) the same; version 7's dwpe (no atomics) the
  same way; versions 9's and 11's bits equal version 8's (the emulator runs their tiles through the
  per-thread copy that GPUs before sm_90 take; the TMA paths themselves are checked on the GPU).
  The L2 prefetches of versions 8 and 10 are checked by the emulator (emu.h's EMU_CHECK_PREFETCH):
  each range inside a buffer, as a prefetch out of bounds would fault on the GPU;
* the plan: every position's row is added exactly once (NumPy executes the plan and matches the
  reference), at every test size, with skewed batches (a token holding most of a batch: long
  groups split into segments) and with the edge cases of the encoding (pairs, groups of 3, of
  exactly SEGMENT and SEGMENT + 1 positions); its size stays within the contract's bound; it is
  fast enough to make once per micro-step; version 12's bits do not depend on the block order, and
  the plan's tickets are back at zero after the launch. The 16-byte bf16x2 reduction it issues on
  sm_90 is checked on the GPU (tests/test_gpu.py);
* bf16: dwte rounded after every added row (a bf16 running sum) fails the tolerance.

Its NumPy reference (at the end): against PyTorch's autograd through the embeddings in float64
(accumulating into dwte and dwpe) and against finite differences; it leaves its inputs alone. The
tests that call PyTorch skip themselves where it is not installed.
"""

import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from references.encoder_backward import (SEGMENT, apply_plan, encoder_backward, encoder_backward_plan,
                                         partial_slots, plan_words)
from references.encoder_forward import encoder_forward
from workbench import expr
from workbench.check import Case, from_storage, make_case, make_inputs, run_reference, to_storage
from workbench.family import Project

from conftest import ROOT, project_with
from references_helpers import F, needs_torch, random_tokens, torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


FAMILY = Project(ROOT).family("encoder_backward")
PARTITION = (5, 6)
ATOMIC, ONE_PASS, BULK, ROWS = 7, 8, 9, 11
PREFETCHED = 10  # version 7 with prefetches: widths that are a multiple of 4 only
PLANNED = 12
SHORT_MAX, SLICES = 8, 8  # encoder_backward_fast.cuh's
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def emulate(version, sizes, **kw):
    """(reports, outputs): the emulator's per-output reports and the outputs' values."""
    outputs = {}
    reports = runner.emulate(version, sizes, outputs=outputs, **kw)
    return reports, outputs


def assert_ok(reports, what=""):
    assert {r.name for r in reports} == {"dwte", "dwpe"}
    for r in reports:
        assert r.ok, f"{what} {r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


def same_bits(a: dict, b: dict):
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.tobytes() == y.tobytes(), f"{name}: {int((x != y).sum())} elements differ"


def skewed_case(version, sizes, seed, share, token=0):
    """A case in which `token` holds about `share` of the positions (the rest uniform)."""
    fam = version.family
    inputs = make_inputs(fam, sizes, seed, version.precision)
    rng = np.random.default_rng(seed + 100)
    inp = inputs["inp"]
    inp[rng.random(inp.shape) < share] = token
    return Case(dict(sizes), seed, inputs, run_reference(fam, sizes, inputs, version.precision), version.precision)


def with_capacity(tmp_path, number, cap, G=None):
    """A copy of version `number` holding `cap` positions at once (and G token blocks if given),
    in a project of its own: the paths for positions that do not fit, at small sizes."""
    src = FAMILY.version(number).path
    fam_dir = project_with(tmp_path, "encoder_backward", versions=False)
    text = re.sub(r"^builds_on = .*\n", "", src.read_text(), flags=re.M)  # the copy holds no other version
    text, n = re.subn(r"constexpr int CAP = \d+;", f"constexpr int CAP = {cap};", text)
    assert n == 1
    if G is not None:
        text, n = re.subn(r'^G = ".*"$', f'G = "{G}"', text, flags=re.M)
        assert n == 1
    (fam_dir / src.name).write_text(text)
    return Project(tmp_path).family("encoder_backward").version(number)


# ---- the partition versions (5, 6) -------------------------------------------------------------
def test_the_partition_versions():
    fp32, bf16 = (FAMILY.version(n) for n in PARTITION)
    assert fp32.precision == "fp32" and fp32.deterministic
    assert bf16.precision == "bf16" and bf16.deterministic
    for v in (fp32, bf16):
        assert not v.scratch
        for sizes in [FAMILY.default_sizes, *FAMILY.test_sizes]:
            assert not v.unmet(sizes), (v.path.name, sizes)
            env = FAMILY.env(sizes, v.block_sizes[0])
            steps = [s for s in v.steps if s.when is None or expr.evaluate(s.when, env)]
            assert len(steps) == 1 and steps[0].kind == "kernel", (v.path.name, sizes)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_the_same_bits_at_every_block_size_and_schedule(number):
    """Within tolerance at each block size, and the same bits on every one: the sums' order is
    the data's, not the launch's."""
    version = FAMILY.version(number)
    sizes = {"B": 4, "T": 33, "C": 36, "V": 7}  # groups of ~19 rows: the long-group path
    first = None
    for block_size in version.block_sizes:
        for sched in ("SHUFFLE", "PRIORITY"):
            reports, outputs = emulate(version, sizes, seed=2, block_size=block_size, sched=sched)
            assert_ok(reports)
            if first is None:
                first = outputs
            same_bits(first, outputs)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_a_skewed_batch_on_the_emulator(number):
    """One token holds ~60% of the positions (a long group split over the 8 running sums),
    the others are spread over a large vocabulary (many blocks, many short groups)."""
    version = FAMILY.version(number)
    sizes = {"B": 2, "T": 96, "C": 264, "V": 3000}
    case = skewed_case(version, sizes, 3, 0.6, token=1234)
    reports, a = emulate(version, sizes, block_size=version.block_sizes[0], sched="PRIORITY", case=case)
    assert_ok(reports)
    reports, b = emulate(version, sizes, block_size=version.block_sizes[-1], sched="SHUFFLE", case=case)
    assert_ok(reports)
    same_bits(a, b)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_positions_that_do_not_fit_give_the_same_bits(tmp_path, number):
    """With room for 16 positions and 2 token blocks: windows of tokens rescanned (V = 50) and
    streamed tokens (V = 3, over 16 positions each, in several batches) at several block
    sizes, against the version as shipped, which holds them all."""
    small = with_capacity(tmp_path, number, 16, G=2)
    version = FAMILY.version(number)
    for sizes in ({"B": 2, "T": 40, "C": 40, "V": 50}, {"B": 3, "T": 21, "C": 37, "V": 3}):
        case = make_case(FAMILY, sizes, 4, version.precision)
        reports, want = emulate(version, sizes, block_size=version.block_sizes[0], case=case)
        assert_ok(reports)
        for block_size, sched in ((small.block_sizes[0], "PRIORITY"), (small.block_sizes[1], "SHUFFLE")):
            reports, got = emulate(small, sizes, block_size=block_size, sched=sched, case=case)
            assert_ok(reports)
            same_bits(want, got)


# ---- the partition versions' bits are the formula's -----------------------------------------------
def partition_formula(case, sizes, precision):
    """dwte and dwpe as the header's formula gives them, in float32 (bf16: rounded once)."""
    def value(name):
        return from_storage(case.inputs[name], "bf16" if precision == "bf16" and name != "inp" else "f32")
    C, T = sizes["C"], sizes["T"]
    dwte = value("dwte").astype(np.float32).reshape(-1, C).copy()
    dwpe = value("dwpe").astype(np.float32).reshape(T, C).copy()
    dout = value("dout").astype(np.float32).reshape(-1, C)
    inp = case.inputs["inp"].reshape(-1)
    for v in np.unique(inp):
        rows = dout[np.flatnonzero(inp == v)]  # in position order
        total = np.zeros(C, np.float32)
        if len(rows) <= 8:
            for row in rows:
                total += row
        else:
            for r in range(8):
                lane = np.zeros(C, np.float32)
                for row in rows[r::8]:
                    lane += row
                total += lane
        dwte[v] += total
    per_t = np.zeros((T, C), np.float32)
    for row in dout.reshape(-1, T, C):
        per_t += row
    dwpe += per_t
    if precision == "bf16":
        dwte, dwpe = (from_storage(to_storage(x, "bf16"), "bf16") for x in (dwte, dwpe))
    return {"dwte": dwte, "dwpe": dwpe}


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_the_partition_bits_are_the_formulas(number):
    version = FAMILY.version(number)
    for sizes in ({"B": 4, "T": 33, "C": 36, "V": 7}, {"B": 2, "T": 3, "C": 37, "V": 5},
                  {"B": 3, "T": 64, "C": 768, "V": 16}):
        case = make_case(FAMILY, sizes, 1, version.precision)
        reports, got = emulate(version, sizes, block_size=version.block_sizes[1], sched="SHUFFLE", case=case)
        assert_ok(reports)
        want = partition_formula(case, sizes, version.precision)
        for name in ("dwte", "dwpe"):
            same_bits({name: want[name].reshape(-1)}, {name: np.asarray(got[name], np.float32).reshape(-1)})


# ---- the one-pass versions (7-11) ---------------------------------------------------------------
def case_with_tokens(version, sizes, seed, tokens):
    """The family's case at these sizes and seed, with inp replaced by `tokens`."""
    inputs = make_inputs(FAMILY, sizes, seed, version.precision)
    inputs["inp"] = np.asarray(tokens, dtype=np.int32).reshape(inputs["inp"].shape)
    return Case(dict(sizes), seed, inputs, run_reference(FAMILY, sizes, inputs, version.precision), version.precision)


def skewed_tokens(sizes, seed, share, token):
    """Uniform tokens, except that `token` holds about `share` of the positions."""
    rng = np.random.default_rng(seed + 100)
    inp = rng.integers(0, sizes["V"], size=sizes["B"] * sizes["T"])
    inp[rng.random(inp.shape) < share] = token
    return inp


# ---- the headers -------------------------------------------------------------------------------
def _steps(v, sizes, block_size):
    env = FAMILY.env(sizes, block_size)
    env["SMS"] = 132
    for name, text in v.derived.items():
        env[name] = expr.evaluate(text, env)
    return env, [s for s in v.steps if s.when is None or expr.evaluate(s.when, env)]


def test_the_one_pass_versions():
    atomic, one_pass = FAMILY.version(ATOMIC), FAMILY.version(ONE_PASS)
    prefetched = FAMILY.version(PREFETCHED)
    assert atomic.precision == prefetched.precision == "fp32"
    assert not atomic.deterministic and not prefetched.deterministic
    bulk, rows = FAMILY.version(BULK), FAMILY.version(ROWS)
    for v in (one_pass, bulk, rows):
        assert v.precision == "bf16" and v.deterministic, v.path.name
    trainer = [{"B": B, "T": T, "C": C, "V": 50257} for B in (1, 4, 32) for T in (64, 1024) for C in (768, 1600)]
    for v in (atomic, prefetched, one_pass, bulk, rows):
        assert not v.scratch
        for sizes in [FAMILY.default_sizes, *FAMILY.test_sizes, *trainer]:
            if v is prefetched and sizes["C"] % 4:
                assert v.unmet(sizes) == ["C % 4 == 0"]
                continue
            if v in (bulk, rows) and sizes["C"] % 8:
                assert v.unmet(sizes) == ["C % 8 == 0"]
                continue
            assert not v.unmet(sizes), (v.path.name, sizes)
            for block_size in v.block_sizes:
                env, steps = _steps(v, sizes, block_size)
                assert len(steps) == 1 and steps[0].kind == "kernel", (v.path.name, sizes)


@pytest.mark.parametrize("number", (ONE_PASS, BULK, ROWS))
def test_the_one_pass_table_fits(number):
    """Versions 8, 9 and 11: a block's positions (B x the time steps its units touch) never
    exceed PB, the table has at least 2 PB slots, and shared memory stays within an SM's 227 KB
    (9 and 11: with their tiles and the ids, and two blocks in one SM at GPT-2's widths), for
    every B the precondition allows and widths from 1 up."""
    v = FAMILY.version(number)
    assert v.unmet({"B": 257, "T": 4, "C": 8, "V": 3})
    for B in (1, 2, 3, 8, 32, 100, 171, 256):
        for C in (1, 5, 8, 16, 40, 96, 768, 4100):
            for T in (1, 3, 1024):
                sizes = {"B": B, "T": T, "C": C, "V": 7}
                if v.unmet(sizes):
                    continue
                for block_size in v.block_sizes:
                    env, steps = _steps(v, sizes, block_size)
                    CU, UB, PB, HS = (env[k] for k in ("CU", "UB", "PB", "HS"))
                    assert 1 <= UB <= block_size and PB <= 512 and HS >= 2 * PB and HS & (HS - 1) == 0
                    # the widest span of any block: its units [u0, u0 + UB) over rows of CU
                    span = max((min(u0 + UB, T * CU) - 1) // CU - u0 // CU + 1 for u0 in range(0, T * CU, UB))
                    assert B * span <= PB, (sizes, block_size)
                    shared = expr.evaluate_int(steps[0].shared, env)
                    assert shared <= 227 * 1024
                    if number in (BULK, ROWS):  # the tile (8 or 9 x UB units of 16 bytes), 9 barriers, the ids up to N = 8192
                        rows = 8 if number == BULK else 9
                        assert shared >= 16 * (rows * UB + 5 + (N // 4 if (N := B * T) <= 8192 else 0)) + 8192
                        if C >= 768:  # GPT-2's widths: two blocks an SM, as the launch bounds intend
                            assert 2 * (shared + 1024) <= 228 * 1024, (sizes, block_size, shared)


@needs_gxx
@pytest.mark.parametrize("number", (ATOMIC, PREFETCHED, ONE_PASS, BULK, ROWS))
def test_skewed_batches_on_the_emulator(number):
    """One token holds ~60% of the positions over a large vocabulary (version 8: one long group,
    many unique tokens and short groups), and ~30% over a vector width of 4 but not 8."""
    version = FAMILY.version(number)
    for sizes, share, seed in (({"B": 2, "T": 96, "C": 264, "V": 3000}, 0.6, 3),
                               ({"B": 3, "T": 50, "C": 36, "V": 40}, 0.3, 4)):
        if version.unmet(sizes):  # versions 9 and 11 (and 10) need widths of whole 16-byte units
            assert number in (BULK, ROWS, PREFETCHED) and sizes["C"] % 8
            continue
        case = case_with_tokens(version, sizes, seed, skewed_tokens(sizes, seed, share, token=sizes["V"] // 2))
        for block_size, sched in ((version.block_sizes[0], "PRIORITY"), (version.block_sizes[-1], "SHUFFLE")):
            reports, _ = emulate(version, sizes, block_size=block_size, sched=sched, case=case)
            assert_ok(reports, f"{sizes} block {block_size}:")


def short_limit_case(version):
    """Unique tokens, but for groups of exactly 8 positions (the leader's thread sums them), of 9
    (the block's long path) and of 3 (several), spread over the batch: N = 800 ids are 200 int4,
    more than a block of 128 has threads, so the scan records a group's positions out of order
    (the thread owning int4 130 runs before the one owning int4 3) and the sort matters."""
    sizes = {"B": 8, "T": 100, "C": 48, "V": 2000}
    N = sizes["B"] * sizes["T"]
    rng = np.random.default_rng(5)
    tokens = rng.permutation(np.arange(1000, 1000 + N))
    spots = rng.permutation(N)
    tokens[spots[:8]] = 7
    tokens[spots[8:17]] = 9
    for g in range(20):
        tokens[spots[17 + 3 * g:20 + 3 * g]] = 20 + g
    return sizes, case_with_tokens(version, sizes, 5, tokens)


@needs_gxx
def test_groups_at_the_short_limit():
    version = FAMILY.version(ONE_PASS)
    sizes, case = short_limit_case(version)
    want = formula(case, sizes, "bf16")
    for block_size, sched in ((128, "PRIORITY"), (512, "SHUFFLE")):
        reports, got = emulate(version, sizes, block_size=block_size, sched=sched, case=case)
        assert_ok(reports, f"block {block_size}:")
        for name in ("dwte", "dwpe"):
            same_bits({name: want[name].reshape(-1)}, {name: np.asarray(got[name], np.float32).reshape(-1)})


@needs_gxx
def test_a_block_with_fewer_units_than_threads():
    """Version 8 at a tiny width and a wide batch: a block may own only 512 positions, so it
    owns fewer units than it has threads (UB < block_size); the idle threads still scan."""
    version = FAMILY.version(ONE_PASS)
    sizes = {"B": 40, "T": 9, "C": 3, "V": 30}
    env, _ = _steps(version, sizes, 128)
    assert env["UB"] < 128
    for seed, block_size in ((0, 128), (1, 512)):
        reports, _ = emulate(version, sizes, seed=seed, block_size=block_size, sched="PRIORITY")
        assert_ok(reports, f"block {block_size}:")


# ---- the bits are the formula's ----------------------------------------------------------------
def formula(case, sizes, precision, dwte_too=True):
    """dwte and dwpe as encoder_backward_fast.cuh's formula gives them, in float32 (bf16: rounded
    once): dwpe's rows summed over b in order; a token's rows in ascending position order when at
    most 8, else per fixed eighth of the positions, the eighths added in order."""
    def value(name):
        return from_storage(case.inputs[name], "bf16" if precision == "bf16" and name != "inp" else "f32")
    B, T, C = sizes["B"], sizes["T"], sizes["C"]
    N = B * T
    dwte = value("dwte").astype(np.float32).reshape(-1, C).copy()
    dwpe = value("dwpe").astype(np.float32).reshape(T, C).copy()
    dout = value("dout").astype(np.float32).reshape(-1, C)
    inp = case.inputs["inp"].reshape(-1)
    if dwte_too:
        for v in np.unique(inp):
            where = np.flatnonzero(inp == v)  # ascending
            total = np.zeros(C, np.float32)
            if len(where) <= SHORT_MAX:
                for n in where:
                    total += dout[n]
            else:
                for r in range(SLICES):
                    lo, hi = r * N // SLICES, (r + 1) * N // SLICES
                    part = np.zeros(C, np.float32)
                    for n in where[(where >= lo) & (where < hi)]:
                        part += dout[n]
                    total += part
            dwte[v] += total
    per_t = np.zeros((T, C), np.float32)
    for row in dout.reshape(B, T, C):
        per_t += row
    dwpe += per_t
    if precision == "bf16":
        dwte, dwpe = (from_storage(to_storage(x, "bf16"), "bf16") for x in (dwte, dwpe))
    return {"dwte": dwte, "dwpe": dwpe}


FORMULA_SIZES = ({"B": 4, "T": 33, "C": 36, "V": 7}, {"B": 2, "T": 3, "C": 37, "V": 5},
                 {"B": 3, "T": 64, "C": 768, "V": 16}, {"B": 8, "T": 64, "C": 40, "V": 2},
                 {"B": 2, "T": 40, "C": 64, "V": 90}, {"B": 20, "T": 12, "C": 24, "V": 40})  # last: 3 groups of b


@needs_gxx
def test_the_one_pass_bits_are_the_formulas_at_every_block_size():
    version = FAMILY.version(ONE_PASS)
    for i, sizes in enumerate(FORMULA_SIZES):
        case = make_case(FAMILY, sizes, 1, version.precision)
        want = formula(case, sizes, version.precision)
        block_sizes = version.block_sizes if i < 2 else version.block_sizes[1:2]
        runs = [(bs, "SHUFFLE" if bs == version.block_sizes[1] else "PRIORITY") for bs in block_sizes]
        assert_formula_bits(version, sizes, case, want, runs)


def assert_formula_bits(version, sizes, case, want, runs):
    """Each (block size, scheduler) run on the emulator passes and gives the formula's bits."""
    for block_size, sched in runs:
        reports, got = emulate(version, sizes, block_size=block_size, sched=sched, case=case)
        assert_ok(reports, f"{sizes} block {block_size}:")
        for name in ("dwte", "dwpe"):
            same_bits({name: want[name].reshape(-1)}, {name: np.asarray(got[name], np.float32).reshape(-1)})


@needs_gxx
@pytest.mark.parametrize("number", (ATOMIC, PREFETCHED))
def test_the_atomic_versions_dwpe_is_fixed_order(number):
    """Versions 7 and 10 add dwpe without atomics: its bits are the formula's (dwte is checked
    against the reference only: its atomics land in any order on a GPU)."""
    version = FAMILY.version(number)
    for sizes in (*FORMULA_SIZES[:3], FORMULA_SIZES[-1]):  # the last: B = 20, three groups of b
        if version.unmet(sizes):
            continue
        case = make_case(FAMILY, sizes, 1, version.precision)
        want = formula(case, sizes, version.precision, dwte_too=False)
        reports, got = emulate(version, sizes, block_size=version.block_sizes[0], case=case)
        assert_ok(reports)
        same_bits({"dwpe": want["dwpe"].reshape(-1)}, {"dwpe": np.asarray(got["dwpe"], np.float32).reshape(-1)})


# ---- the shared header at fp32: bits that bf16's one rounding would hide ------------------------
# Version 8's sums differ from other orders only in the last bits of fp32, which its rounding to
# bf16 almost always hides. The same header with fp32 rows (a twin of version 8 made for these
# tests, in a project of its own) shows every bit: the sort of a short group's positions, the
# slices of a long one and their order all change the fp32 results.
FP32_CODE = r"""
#include "encoder_backward_fast.cuh"

constexpr int VEC_MAX = 4;

namespace ebfast {
template <> struct Row<float, 4> {
    float4 q = {0.0f, 0.0f, 0.0f, 0.0f};
    __device__ __forceinline__ void load(const float* p) { q = *reinterpret_cast<const float4*>(p); }
    __device__ __forceinline__ void add_to(float (&acc)[4]) const {
        acc[0] += q.x;
        acc[1] += q.y;
        acc[2] += q.z;
        acc[3] += q.w;
    }
    __device__ __forceinline__ void store_plus(float* p, const float (&sum)[4]) const {
        *reinterpret_cast<float4*>(p) = make_float4(q.x + sum[0], q.y + sum[1], q.z + sum[2], q.w + sum[3]);
    }
};
template <> struct Row<float, 1> {
    float x = 0.0f;
    __device__ __forceinline__ void load(const float* p) { x = *p; }
    __device__ __forceinline__ void add_to(float (&acc)[1]) const { acc[0] += x; }
    __device__ __forceinline__ void store_plus(float* p, const float (&sum)[1]) const { p[0] = x + sum[0]; }
};
}  // namespace ebfast

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward9_vec4(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C,
                       int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];
    ebfast::encoder_backward_fast<4, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward9_scalar(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C,
                         int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];
    ebfast::encoder_backward_fast<1, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}
"""


def _sub(text, old, new):
    assert old in text, old
    return text.replace(old, new)


@pytest.fixture
def fp32_twin(tmp_path):
    """Version 8's header and launch with fp32 rows (4 channels a chunk), as version 9 of a copy of
    the family."""
    header = FAMILY.version(ONE_PASS).path.read_text().partition("*/")[0]
    header = _sub(header, 'precision = "bf16"\n', "")
    header = re.sub(r"^builds_on = .*\n", "", header, flags=re.M)  # the copy holds no other version
    header = _sub(header, 'CU = "C // 8 if C % 8 == 0 else C"', 'CU = "C // 4 if C % 4 == 0 else C"')
    header = _sub(header, 'shared_bytes = "8192 *', 'shared_bytes = "4096 *')  # 256 x 4 floats a pair
    header = _sub(_sub(header, '"C % 8 == 0"', '"C % 4 == 0"'), '"C % 8 != 0"', '"C % 4 != 0"')
    header = _sub(_sub(header, "encoder_backward8_pack8", "encoder_backward9_vec4"),
                  "encoder_backward8_scalar", "encoder_backward9_scalar")
    fam_dir = project_with(tmp_path, "encoder_backward", versions=False)
    (fam_dir / "9_fp32_one_pass.cu").write_text(header + "*/" + FP32_CODE)
    version = Project(tmp_path).family("encoder_backward").version(9)
    assert version.precision == "fp32" and version.deterministic
    return version


@needs_gxx
def test_the_header_at_fp32_bits_are_the_formulas(fp32_twin):
    cases = [(sizes, make_case(FAMILY, sizes, 1, "fp32")) for sizes in FORMULA_SIZES]
    cases.append(short_limit_case(fp32_twin))
    sizes = {"B": 2, "T": 96, "C": 264, "V": 3000}
    cases.append((sizes, case_with_tokens(fp32_twin, sizes, 3, skewed_tokens(sizes, 3, 0.6, token=1500))))
    for i, (sizes, case) in enumerate(cases):
        want = formula(case, sizes, "fp32")
        runs = [(fp32_twin.block_sizes[i % 3], "PRIORITY"), (fp32_twin.block_sizes[(i + 1) % 3], "SHUFFLE")]
        assert_formula_bits(fp32_twin, sizes, case, want, runs)


@needs_gxx
@pytest.mark.parametrize("number", (BULK, ROWS))
def test_the_bulk_versions_give_version_8s_bits(number):
    """Versions 9 and 11 change when and how rows arrive (9: the first dout rows; 11: the dwte and
    dwpe chunks), not a single sum: their outputs are version 8's bit for bit, at the default
    width with B below, at and above the tiles' 8 row-blocks, on a skewed batch (long groups),
    and at a width whose rows split across blocks."""
    one_pass, bulk = FAMILY.version(ONE_PASS), FAMILY.version(number)
    cases = [({"B": 3, "T": 33, "C": 96, "V": 50}, None), ({"B": 8, "T": 20, "C": 64, "V": 300}, None),
             ({"B": 11, "T": 9, "C": 40, "V": 30}, None), ({"B": 8, "T": 64, "C": 40, "V": 2}, None),
             ({"B": 2, "T": 7, "C": 520, "V": 20}, None)]
    sizes = {"B": 4, "T": 48, "C": 72, "V": 500}
    cases.append((sizes, case_with_tokens(bulk, sizes, 2, skewed_tokens(sizes, 2, 0.5, token=7))))
    for i, (sizes, case) in enumerate(cases):
        case = case or make_case(FAMILY, sizes, i, "bf16")
        block_size = bulk.block_sizes[i % 3]
        r8, o8 = emulate(one_pass, sizes, block_size=block_size, case=case)
        rn, on = emulate(bulk, sizes, block_size=block_size, sched="SHUFFLE", case=case)
        assert_ok(r8, f"8 {sizes}")
        assert_ok(rn, f"{number} {sizes}")
        same_bits(o8, on)


# ---- the plan and version 12 --------------------------------------------------------------------
def random_case(rng, B, T, C, V, tokens=None):
    inp = rng.integers(0, V, (B, T)) if tokens is None else np.asarray(tokens).reshape(B, T)
    return (rng.normal(size=(V, C)), rng.normal(size=(T, C)), rng.normal(size=(B, T, C)), inp)


def check_plan(dwte, dwpe, dout, inp):
    C = dout.shape[-1]
    role, plan = encoder_backward_plan(inp, C)
    N = inp.size
    assert role.shape == (N,) and plan.size == plan_words(N, C)
    got_te, got_pe = apply_plan(dwte, dwpe, dout, inp, role, plan)
    want = encoder_backward(dwte, dwpe, dout, inp)
    np.testing.assert_allclose(got_te, want["dwte"], atol=1e-9)
    np.testing.assert_allclose(got_pe, want["dwpe"], atol=1e-9)
    return role, plan


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_the_plan_adds_every_row_once(sizes):
    rng = np.random.default_rng(3)
    check_plan(*random_case(rng, sizes["B"], sizes["T"], sizes["C"], sizes["V"]))


@pytest.mark.parametrize("k", [1, 2, 3, SEGMENT, SEGMENT + 1, 2 * SEGMENT + 1, 200])
def test_groups_of_every_kind(k):
    """A group of k positions among lone ones: its leader's role says pair, segment or long group."""
    B, T, C, V = 2, 128, 16, 50257
    rng = np.random.default_rng(k)
    tokens = 1000 + np.arange(B * T)  # all distinct
    where = rng.choice(B * T, size=k, replace=False)
    tokens[where] = 7
    role, plan = check_plan(*random_case(rng, B, T, C, V, tokens))
    N = B * T
    first = np.sort(where)[0]
    assert (role == -1).sum() == (N - k if k > 1 else N)
    if k == 1:
        assert role[first] == -1
    elif k == 2:
        assert role[first] == np.sort(where)[1]
    else:
        segments = -(-k // SEGMENT)
        leaders = np.flatnonzero(role >= N)
        assert len(leaders) == segments and first in leaders
        for n in leaders:
            h = role[n] - N
            others, counters, slot, first_slot, segs = plan[h:h + 5]
            assert h % 4 == 0 and segs == segments
            assert min(k, SEGMENT // 2) <= others + 1 <= SEGMENT
            assert (counters >= 0) == (segments > 1)
            if segments > 1:
                assert first_slot <= slot < first_slot + segments <= partial_slots(N)
        assert (role == -2).sum() == k - segments


def test_a_token_holding_most_of_a_batch():
    rng = np.random.default_rng(0)
    B, T, C, V = 8, 512, 24, 300
    tokens = rng.integers(0, V, B * T)
    tokens[rng.random(B * T) < 0.6] = 5
    role, plan = check_plan(*random_case(rng, B, T, C, V, tokens))
    assert (role >= B * T).sum() >= 0.6 * B * T / SEGMENT


def test_the_contract_sizes_bound_the_plan_and_the_scratch():
    """The family's P and version 12's scratch hold the worst batches (one token everywhere;
    tokens in groups of 3, the most records)."""
    version = FAMILY.version(PLANNED)
    for B, T, C in [(1, 1, 8), (4, 33, 40), (8, 1024, 768), (3, 17, 4104)]:
        N = B * T
        env = FAMILY.env({"B": B, "T": T, "C": C, "V": 7})
        assert env["P"] == plan_words(N, C)
        scratch = expr.evaluate(next(s.size for s in version.scratch if s.name == "partial"), env)
        assert scratch >= partial_slots(N) * C
        for tokens in (np.zeros(N, int), np.arange(N) // 3, np.arange(N) // (SEGMENT + 1)):
            role, plan = encoder_backward_plan(tokens.reshape(B, T), C)
            assert plan.size == env["P"]
            slots = [plan[r - N + 2] for r in role if r >= N]
            assert max(slots + [-1]) < partial_slots(N)


def test_the_plan_is_quick_enough_for_every_micro_step():
    """A trainer's batch (B=32, T=1024) in well under a step's time (tens of ms); never a timed
    bar, only a guard against a Python loop creeping in (which takes ~100x longer)."""
    rng = np.random.default_rng(0)
    inp = np.minimum(rng.zipf(1.2, (32, 1024)), 50256)
    start = time.perf_counter()
    encoder_backward_plan(inp, 768)
    assert time.perf_counter() - start < 1.0


def planned_case_with_tokens(sizes, seed, tokens):
    """The family's bf16 case with inp replaced by `tokens` (the plan made again for them)."""
    from references.encoder_backward import prepare_plan
    inputs = make_inputs(FAMILY, sizes, seed, "bf16")
    inputs["inp"] = np.asarray(tokens, dtype=np.int32).reshape(inputs["inp"].shape)
    inputs.update(prepare_plan(inputs["inp"], sizes["C"]))
    inputs["plan"] = inputs["plan"].astype(np.int32)
    return Case(dict(sizes), seed, inputs, run_reference(FAMILY, sizes, inputs, "bf16"), "bf16")


@needs_gxx
def test_version_12_long_groups_in_any_block_order():
    """A token on 60% of the positions: dozens of segments, their last finisher in another block
    at every order; the bits do not depend on it, and every ticket is zero again after."""
    version = FAMILY.version(PLANNED)
    sizes = {"B": 8, "T": 96, "C": 64, "V": 40}
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, sizes["V"], sizes["B"] * sizes["T"])
    tokens[rng.random(tokens.size) < 0.6] = 3
    tokens[:3] = 9  # and a group of three at the start
    case = planned_case_with_tokens(sizes, 0, tokens)
    assert (case.inputs["role"] >= tokens.size).sum() > 20
    first = None
    for order in (0, 1, 2):
        outputs, after = {}, {}
        assert_ok(runner.emulate(version, sizes, block_size=128, case=case, block_order=order,
                                 outputs=outputs, inputs_after=after))
        assert after["plan"].tobytes() == np.asarray(case.inputs["plan"]).tobytes(), "tickets left set"
        if first is None:
            first = outputs
        for name in outputs:
            assert outputs[name].tobytes() == first[name].tobytes(), f"{name} differs with block order {order}"


# ---- bf16 ----------------------------------------------------------------------------------------
def rounded(values):
    """float64 values rounded to the nearest bf16 (as float64)."""
    return from_storage(to_storage(np.asarray(values, dtype=np.float32), "bf16"), "bf16").astype(np.float64)


def passes(expected, got, atol, rtol):
    return bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


def test_the_encoder_backward_tolerance_fails_a_bf16_running_sum():
    """dwte rounded to bf16 after every added row (what bf16 atomics or a bf16 accumulator do)
    drifts past the tolerance when few tokens collect many rows; rounding once does not."""
    fam = FAMILY
    sizes = {"B": 8, "T": 64, "C": 40, "V": 2}
    case = make_case(fam, sizes, 0, "bf16")
    dwte = from_storage(case.inputs["dwte"], "bf16").astype(np.float64)
    dout = from_storage(case.inputs["dout"], "bf16").astype(np.float64).reshape(-1, sizes["C"])
    for position, token in enumerate(case.inputs["inp"].reshape(-1)):
        dwte[token] = rounded(dwte[token] + dout[position])
    atol, rtol = fam.tolerance(fam.arg("dwte"), "bf16")
    assert not passes(case.expected["dwte"], dwte, atol, rtol)
    assert passes(case.expected["dwte"], rounded(case.expected["dwte"]), atol, rtol)


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, C, V", [(1, 1, 1, 1), (2, 3, 5, 1), (2, 3, 37, 5), (4, 33, 36, 7)])
def test_encoder_backward_matches_torch_autograd_and_accumulates(B, T, C, V):
    rng = np.random.default_rng(1)
    inp, dout = random_tokens(rng, B, T, V), rng.normal(size=(B, T, C))
    dwte0, dwpe0 = rng.normal(size=(V, C)), rng.normal(size=(T, C))
    wte = torch.zeros(V, C, dtype=torch.float64, requires_grad=True)
    wpe = torch.zeros(T, C, dtype=torch.float64, requires_grad=True)
    (F.embedding(torch.from_numpy(inp), wte) + wpe).backward(torch.from_numpy(dout))
    got = encoder_backward(dwte0, dwpe0, dout, inp)
    np.testing.assert_allclose(got["dwte"], dwte0 + wte.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["dwpe"], dwpe0 + wpe.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_encoder_backward_leaves_its_inputs_alone():
    rng = np.random.default_rng(2)
    dwte, dwpe = rng.normal(size=(3, 4)), rng.normal(size=(2, 4))
    keep = dwte.copy(), dwpe.copy()
    encoder_backward(dwte, dwpe, rng.normal(size=(1, 2, 4)), np.array([[1, 1]]))
    np.testing.assert_array_equal(dwte, keep[0])
    np.testing.assert_array_equal(dwpe, keep[1])


def test_encoder_backward_by_finite_differences():
    # L = sum(out * dout) is linear in wte and wpe, so central differences are exact up to rounding.
    rng = np.random.default_rng(3)
    B, T, C, V = 2, 3, 4, 3
    inp = np.array([[0, 2, 0], [0, 1, 2]])  # token 0 three times: repeated rows must add up
    dout, wte, wpe = rng.normal(size=(B, T, C)), rng.normal(size=(V, C)), rng.normal(size=(T, C))
    got = encoder_backward(np.zeros((V, C)), np.zeros((T, C)), dout, inp)

    def loss(wte, wpe):
        return float((encoder_forward(inp, wte, wpe)["out"] * dout).sum())

    h = 1e-6
    for name, x, grad in (("wte", wte, got["dwte"]), ("wpe", wpe, got["dwpe"])):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += h
            minus[idx] -= h
            args = {"wte": wte, "wpe": wpe}
            lp = loss(**{**args, name: plus})
            lm = loss(**{**args, name: minus})
            fd[idx] = (lp - lm) / (2 * h)
        np.testing.assert_allclose(grad, fd, atol=1e-7, err_msg=name)
