"""encoder_backward's one-pass versions (7: fp32, vector atomics into dwte; 10: the same with the
dwte chunks prefetched to L2; 8: bf16, no atomics, kernels/encoder_backward/encoder_backward_fast.cuh;
9: version 8 with its first dout rows bulk-copied into shared memory, the header's DOUT path;
11: version 8 with the dwte and dwpe chunks it updates bulk-copied into shared memory, ROWS),
without a GPU.

* the headers: precision, determinism, one kernel launch and no scratch at every size, shared
  memory within an SM's at every block size up to the sizes the precondition allows;
* the kernels on the CPU SIMT emulator (tests/gpu_emu): every output element within tolerance at
  every test size of the family (V = 1 and V = 2 included), several seeds and block sizes, with
  one warp racing ahead (PRIORITY: a missing barrier shows) and with warps in step (SHUFFLE);
* skewed batches (one token holding most positions, as frequent tokens in real text), groups of
  exactly 8 and 9 positions (the two sides of version 8's short and long paths), a batch wide
  enough that a block owns fewer units than it has threads;
* version 8's bits: the same at every block size and schedule, and equal to a float32 NumPy model
  of its header's formula (bf16: rounded once); version 7's dwpe (no atomics) the same way;
  versions 9's and 11's bits equal version 8's (the emulator runs their tiles through the
  per-thread copy that GPUs before sm_90 take; the TMA paths themselves are checked on the GPU).

The L2 prefetches of versions 8 and 10 are checked by the emulator (emu.h's EMU_CHECK_PREFETCH):
each range inside a buffer, as a prefetch out of bounds would fault on the GPU.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import Case, from_storage, make_case, make_inputs, run_reference, to_storage
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

FAMILY = Project(ROOT).family("encoder_backward")
ATOMIC, ONE_PASS, BULK, ROWS = 7, 8, 9, 11
PREFETCHED = 10  # version 7 with prefetches: widths that are a multiple of 4 only
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


def test_the_versions():
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


# ---- the kernels on the emulator ---------------------------------------------------------------
EMULATED = [(n, s) for n in (ATOMIC, PREFETCHED, ONE_PASS, BULK, ROWS) for s in FAMILY.test_sizes
            if not FAMILY.version(n).unmet(s)]


@needs_gxx
@pytest.mark.parametrize("number, sizes", EMULATED, ids=[f"{n}-{FAMILY.format_sizes(s)}" for n, s in EMULATED])
def test_every_test_size_on_the_emulator(number, sizes):
    version = FAMILY.version(number)
    runs = [(0, version.block_sizes[0], "PRIORITY"), (1, version.block_sizes[-1], "SHUFFLE"),
            (2, version.block_sizes[1], "PRIORITY")]
    if sizes["V"] * sizes["C"] > 10**6:  # the classic vocabulary: an 80M-element dwte, slow to draw and compare
        runs = runs[1:2]
    for seed, block_size, sched in runs:
        reports, _ = emulate(version, sizes, seed=seed, block_size=block_size, sched=sched)
        assert_ok(reports, f"seed {seed}, block {block_size}, {sched}:")


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
        for block_size in block_sizes:
            sched = "SHUFFLE" if block_size == version.block_sizes[1] else "PRIORITY"
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
    fam_dir = tmp_path / "kernels" / "encoder_backward"
    fam_dir.mkdir(parents=True)
    shutil.copy(FAMILY.path / "family.toml", fam_dir)
    shutil.copytree(ROOT / "references", tmp_path / "references")
    shutil.copytree(ROOT / "kernels" / "common", tmp_path / "kernels" / "common")
    for helper in FAMILY.path.glob("*.cuh"):  # the family's own helpers
        shutil.copy(helper, fam_dir)
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
        for block_size, sched in runs:
            reports, got = emulate(fp32_twin, sizes, block_size=block_size, sched=sched, case=case)
            assert_ok(reports, f"{sizes} block {block_size}:")
            for name in ("dwte", "dwpe"):
                same_bits({name: want[name].reshape(-1)}, {name: np.asarray(got[name], np.float32).reshape(-1)})


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
