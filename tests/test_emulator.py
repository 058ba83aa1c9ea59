"""Every version's emulator cases on the CPU SIMT emulator (tests/gpu_emu), without a GPU.

* the cases: each version's header lists them in [[emulate]] tables (kernels/README.md): sizes
  (the family's test sizes and others that reach a version's corners), and per size the runs:
  block size, seed, when cp.async copies land (LATE: data read before its wait is stale), the
  scheduler (PRIORITY: one warp races ahead, so a missing barrier shows; SHUFFLE: warps in step),
  the block order (a "last block done" ticket won by other blocks) and the multiprocessor count
  (1: persistent loops run many passes). Every output element is compared with the float64
  reference at the version's tolerance. Cases whose sizes are large are `slow` (conftest.py), and
  so are a version's cases after the first of each kind of run (another seed, block size or size);
* the emulator itself: a missing __syncthreads shows, and its block votes
  (__syncthreads_count/_or/_and) count.

A family's own test file (tests/test_<family>.py) holds what is not one of these cases: outputs
compared bit for bit, crafted inputs, changed sources.
"""

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from workbench.family import Project

from conftest import FIXTURES, ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def all_cases():
    out = []
    for fam in PROJECT.families():
        for v in fam.versions:
            out += [pytest.param(fam.name, v.number, sizes, run, id=runner.case_id(v, sizes, run),
                                 marks=[pytest.mark.slow] if table.slow else [])
                    for sizes, run, table in runner.table_cases(v)]
    return out


CASES = all_cases()


def test_the_listed_sizes_are_ones_the_version_takes():
    """A size a header lists is one its version takes (a stale size is an error, not skipped)."""
    for fam in PROJECT.families():
        for v in fam.versions:
            for table in v.emulate:
                for sizes in table.sizes:
                    assert not v.unmet(sizes), \
                        f"{v.path.name}: [[emulate]] lists {fam.format_sizes(sizes)}: {v.unmet(sizes)}"


def test_a_slow_tables_cases_are_all_slow_and_the_others_are_not_marked_here():
    """`slow = true` on an [[emulate]] table marks each of its cases (CI's slow run only); the other
    tables' cases are left to conftest's rules (large sizes, repeats)."""
    slow_tables = 0
    for fam in PROJECT.families():
        for v in fam.versions:
            for table in v.emulate:
                slow_tables += table.slow
    assert slow_tables >= 20
    for param in CASES:
        family, number, sizes, run = param.values
        table = next(t for s, r, t in runner.table_cases(PROJECT.family(family).version(number)) if s == sizes and r == run)
        assert any(m.name == "slow" for m in param.marks) == table.slow, param.id


def test_cases_are_many_and_distinct():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 768  # the emulated cases when the headers took them over


@needs_gxx
@pytest.mark.parametrize("family, number, sizes, run", CASES)
def test_on_the_emulator(family, number, sizes, run):
    version = PROJECT.family(family).version(number)
    reports = runner.run_case(version, sizes, run)
    assert {r.name for r in reports} == {a.name for a in version.args if a.is_output}
    bad = [(r.name, r.bad, r.total, [m.__dict__ for m in r.first]) for r in reports if not r.ok]
    assert not bad, bad


# ---- the emulator itself ------------------------------------------------------------------------
def scale_version(tmp_path, name, source):
    """Version 1 of the fixture's `scale` family (y = alpha x), from `source`, in a project of its own."""
    shutil.copytree(FIXTURES / "project" / "references", tmp_path / "references")
    fam = tmp_path / "kernels" / "scale"
    fam.mkdir(parents=True)
    shutil.copy(FIXTURES / "project" / "kernels" / "scale" / "family.toml", fam)
    (fam / name).write_text(source)
    return Project(tmp_path).family("scale").version(1)


RACY = """/*
title = "y = alpha x through shared memory, each thread reading another warp's slot"
block_sizes = [128]
[[launch]]
kernel = "scale_smem"
grid = "cdiv(N, block_size)"
block = "block_size"
shared = "4 * block_size"
args = ["y", "x", "N", "alpha"]
*/
extern "C" __global__ void scale_smem(float* y, const float* x, int N, float alpha) {
    extern __shared__ float buf[];
    int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockDim.x - 1 - threadIdx.x;
    buf[threadIdx.x] = i < N ? x[i] : 0.0f;
    BARRIER
    int src = blockIdx.x * blockDim.x + j;
    if (src < N) y[src] = alpha * buf[j];
}
"""


@needs_gxx
@pytest.mark.parametrize("barrier", [True, False])
def test_the_emulator_catches_a_missing_barrier(tmp_path, barrier):
    source = textwrap.dedent(RACY).replace("BARRIER", "__syncthreads();" if barrier else "")
    version = scale_version(tmp_path, "1_smem.cu", source)
    (report,) = runner.emulate(version, {"N": 300}, block_size=128, mode="LATE", sched="PRIORITY")
    assert report.ok == barrier


@needs_gxx
@pytest.mark.parametrize("barrier", [True, False])
def test_a_static_shared_array_is_the_blocks_own(tmp_path, barrier):
    """A __shared__ array declared without extern is one array for the block, as on the GPU: the
    reversal through it works with the barrier and fails without (one copy per emulated thread,
    as before, fails even with it)."""
    source = textwrap.dedent(RACY).replace("BARRIER", "__syncthreads();" if barrier else "")
    source = source.replace("extern __shared__ float buf[];", "__shared__ float buf[1024];")
    assert "extern __shared__" not in source
    version = scale_version(tmp_path, "1_static_smem.cu", source)
    (report,) = runner.emulate(version, {"N": 300}, block_size=128, mode="LATE", sched="PRIORITY")
    assert report.ok == barrier


def test_only_static_shared_declarations_become_cpp_statics():
    source = ("extern __shared__ float a[];\nextern  __shared__ __align__(16) char b[];\n"
              "__shared__ float c[33];\n    __shared__ bool last;\nint not__shared__x;")
    out = runner._emulated_source(source)
    assert out.splitlines() == ["extern __shared__ float a[];", "extern __shared__ __align__(16) char b[];",
                                "static float c[33];", "    static bool last;", "int not__shared__x;"]


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
    version = scale_version(tmp_path, "1_votes.cu", VOTES)
    (report,) = runner.emulate(version, {"N": 300}, block_size=128, sched=sched, block_order=3)
    assert report.ok


# ---- bf16 pairs and byte permutes (softmax_bf16.cuh), against numpy ---------------------------------
# A driver of emu.h's __byte_perm and of the inline PTX that runner.py rewrites (the source goes
# through runner._emulated_source, as a version's does): each input line "op a b c" in hex gives
# one result. The expected values are worked out here from the PTX ISA's definitions (prmt's
# default mode; cvt.rn.bf16x2.f32; max.bf16x2), in numpy, by other means than the emulator's.
OPS = r"""
__device__ unsigned pack2(float lo, float hi) {
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));  // as softmax_bf16.cuh
    return w;
}
__device__ unsigned max2(unsigned a, unsigned b) {
    unsigned d;
    asm volatile("max.bf16x2 %0, %1,  %2;"
                 : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ float never_called(float u) {  // unmodelled, but never compiled into the program
    float th;
    asm("tanh.approx.f32 %0, %1;" : "=f"(th) : "f"(u));
    return th;
}
#include <iostream>
int main() {
    std::string op;
    unsigned a, b, c;
    while (std::cin >> op >> std::hex >> a >> b >> c) {
        unsigned r = op == "perm" ? __byte_perm(a, b, c)
                   : op == "pack" ? pack2(__uint_as_float(a), __uint_as_float(b))
                   : op == "one" ? unsigned(__float2bfloat16_rn(__uint_as_float(a)).bits) : max2(a, b);
        std::cout << std::hex << r << "\n";
    }
}
"""


def build_ops(tmp_path, source):
    """Compile `source` after emu.h and emu_bf16.h as runner.build does (g++ -O1); (exe or None, stderr)."""
    cpp = tmp_path / "ops.cpp"
    cpp.write_text('#include "emu.h"\n#include "emu_bf16.h"\n' + runner._emulated_source(source))
    exe = tmp_path / "ops"
    proc = subprocess.run(["g++", "-std=c++20", "-O1", "-w", f"-I{runner.HERE}", str(cpp), "-o", str(exe)],
                          capture_output=True, text=True, timeout=runner.BUILD_S)
    return (exe if proc.returncode == 0 else None), proc.stderr


@pytest.fixture(scope="module")
def emu_op(tmp_path_factory):
    """emu_op(op, rows): the driver's results for rows of (a, b, c), op "perm", "pack", "one"
    (__float2bfloat16_rn of a) or "max"."""
    if shutil.which("g++") is None:
        pytest.skip("the emulator needs g++")
    exe, err = build_ops(tmp_path_factory.mktemp("ops"), OPS)
    assert exe, err

    def run(op, rows):
        text = "".join(f"{op} {a:x} {b:x} {c:x}\n" for a, b, c in rows)
        out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout
        return [int(line, 16) for line in out.split()]
    return run


def byte_perm_expected(x: int, y: int, s: int) -> int:
    """prmt.b32 d, x, y, s (default mode): byte n of d from nibble n of s, of the bytes of {y, x}
    (x the low four); the nibble's bit 3 replicates the picked byte's sign bit."""
    src = np.array([x, y], dtype="<u4").view(np.uint8)
    out = np.zeros(4, np.uint8)
    for n in range(4):
        ctl = (s >> (4 * n)) & 0xF
        out[n] = src[ctl & 7] if not ctl & 8 else (0xFF if src[ctl & 7] >= 0x80 else 0)
    return int(out.view("<u4")[0])


def bf16_rn_expected(bits: int) -> int:
    """The float32 `bits` rounded to bf16 by value: the nearer of the two bf16 around it (in float64,
    exactly), a tie to the even one; beyond the largest bf16 by half a step or more, inf; a NaN,
    the canonical 0x7FFF."""
    f = np.uint32(bits).view(np.float32)
    if np.isnan(f):
        return 0x7FFF
    sign, mag = bits & 0x80000000, bits & 0x7FFFFFFF
    down = mag & 0xFFFF0000  # toward zero
    if down == mag:
        return (sign | mag) >> 16
    up = down + 0x10000
    value = lambda b: float(np.uint32(b).view(np.float32))  # noqa: E731
    x, lo = value(mag), value(down)
    hi = 2.0 ** 128 if up == 0x7F800000 else value(up)  # one step past the largest bf16 is inf
    pick = down if x - lo < hi - x else up if hi - x < x - lo else (down if not down & 0x10000 else up)
    return (sign | pick) >> 16


def bf16_max_expected(a: int, b: int) -> int:
    """max.bf16x2 on one half: the larger value, +0 over -0; a NaN loses to a number; two NaNs give 0x7FFF."""
    fa, fb = (float(np.uint32(h << 16).view(np.float32)) for h in (a, b))
    if np.isnan(fa) and np.isnan(fb):
        return 0x7FFF
    if np.isnan(fa) or np.isnan(fb):
        return b if np.isnan(fa) else a
    if fa == fb == 0.0:
        return a if not a & 0x8000 else b
    return a if fa > fb else b


def test_expected_values_by_hand():
    """The numpy models above against values worked out by hand (and cub::PRMT's documented example)."""
    assert byte_perm_expected(0x03020100, 0x07060504, 0x7531) == 0x07050301
    assert byte_perm_expected(0xAABBCCDD, 0, 0x1044) == 0xCCDD0000
    assert byte_perm_expected(0x7F80FF01, 0, 0xBA98) == 0x00FFFF00
    assert bf16_rn_expected(0x3F808000) == 0x3F80  # 1 + 2^-8: a tie, to the even 1.0
    assert bf16_rn_expected(0x3F818000) == 0x3F82  # 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6
    assert bf16_rn_expected(0x7F7F8000) == 0x7F80  # halfway past the largest bf16: inf
    assert bf16_max_expected(0x8000, 0x0000) == 0x0000


PERM_WORDS = [(0xAABBCCDD, 0x00000000), (0x11223344, 0x55667788), (0x7F80FF01, 0x80017E02), (0x3F80BF81, 0xFF80FF80)]


PERM_CASES = [  # selector, [((x, y), the result worked out by hand)]
    # softmax_bf16.cuh's unpack8_again: the low bf16 widened (value << 16), then the high one (value & 0xffff0000)
    (0x1044, [((0xAABBCCDD, 0), 0xCCDD0000), ((0x3F80BF81, 0), 0xBF810000)]),
    (0x3244, [((0xAABBCCDD, 0), 0xAABB0000), ((0x3F80BF81, 0), 0x3F800000)]),
    # the low halves of x and y, the high halves (the bf16x2 packing of two words)
    (0x5410, [((0x11223344, 0x55667788), 0x77883344)]),
    (0x7632, [((0x11223344, 0x55667788), 0x55661122)]),
    # sign replication (nibble bit 3): bytes 0x01, 0xFF, 0x80, 0x7F of x
    (0xBA98, [((0x7F80FF01, 0), 0x00FFFF00)]),
    (0xF8C4, [((0x7F80FF01, 0x80017E02), 0xFF000002)]),
    # only the low 16 bits of the selector count
    (0xABCD5410, [((0x11223344, 0x55667788), 0x77883344)]),
]


@pytest.mark.parametrize("selector, cases", [pytest.param(s, c, id=f"{s:#06x}") for s, c in PERM_CASES])
def test_byte_perm(emu_op, selector, cases):
    rows = [(x, y, selector) for (x, y), _ in cases] + [(x, y, selector) for x, y in PERM_WORDS]
    want = [w for _, w in cases] + [byte_perm_expected(*r) for r in rows[len(cases):]]
    assert [byte_perm_expected(*r) for r in rows[:len(cases)]] == want[:len(cases)]
    assert [f"{v:08x}" for v in emu_op("perm", rows)] == [f"{v:08x}" for v in want]


def test_byte_perm_every_nibble(emu_op):
    rng = np.random.default_rng(5)
    rows = [(int(x), int(y), int(s)) for x, y, s in rng.integers(0, 2 ** 32, size=(2000, 3), dtype=np.uint64)]
    rows += [(0x80FF7F01, 0x00817E02, sum(n << (4 * k) for k in range(4))) for n in range(16)]  # every nibble value
    got = emu_op("perm", rows)
    assert [f"{v:08x}" for v in got] == [f"{byte_perm_expected(*r):08x}" for r in rows]


BF16_SPECIAL = {  # float32 bits -> bf16 bits, worked out by hand
    0x00000000: 0x0000, 0x80000000: 0x8000,   # signed zeros
    0x3F800000: 0x3F80, 0xC0200000: 0xC020,   # 1, -2.5: exact
    0x3F808000: 0x3F80, 0x3F818000: 0x3F82,   # ties to even: down from 1 + 2^-8, up from 1 + 3 * 2^-8
    0xBF808000: 0xBF80, 0xBF818000: 0xBF82,   # the same, negative
    0x3F808001: 0x3F81, 0x3F807FFF: 0x3F80,   # just past a tie, just short of it
    0x3EAAAAAB: 0x3EAB, 0xBEAAAAAB: 0xBEAB,   # 1/3, -1/3
    0x7F7F7FFF: 0x7F7F, 0x7F7F8000: 0x7F80,   # the largest bf16; halfway past it: inf
    0xFF7F8000: 0xFF80, 0x7F7FFFFF: 0x7F80,   # -inf; the largest float
    0x7F800000: 0x7F80, 0xFF800000: 0xFF80,   # inf, -inf
    0x00008000: 0x0000, 0x00018000: 0x0002,   # subnormal ties to even
    0x80008001: 0x8001, 0x007FFFFF: 0x0080,   # a subnormal rounded up; the largest subnormal up to the smallest normal
    0x7FC00000: 0x7FFF, 0xFFC00000: 0x7FFF,   # NaNs: the canonical one
    0x7F800001: 0x7FFF, 0xFF812345: 0x7FFF, 0x7FFFFFFF: 0x7FFF,
}


def test_cvt_rn_bf16x2_f32_special_values(emu_op):
    specials = list(BF16_SPECIAL)
    assert [bf16_rn_expected(b) for b in specials] == list(BF16_SPECIAL.values())
    # every special in the low half (b, the second source) with a neighbour in the high (a) and the other way round
    rows = [(lo, hi, 0) for lo, hi in zip(specials, specials[1:] + specials[:1])]
    got = emu_op("pack", rows)
    want = [(BF16_SPECIAL[hi] << 16) | BF16_SPECIAL[lo] for lo, hi, _ in rows]
    assert [f"{v:08x}" for v in got] == [f"{v:08x}" for v in want]


def test_cvt_rn_bf16x2_f32_random(emu_op):
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2 ** 32, size=3000, dtype=np.uint64)
    bits[:1000] = (bits[:1000] & 0xFFFF0000) | 0x8000  # ties
    bits[1000:1500] = np.float32(rng.normal(0, 3, 500)).view(np.uint32)
    rows = [(int(lo), int(hi), 0) for lo, hi in bits.reshape(-1, 2)]
    want = [(bf16_rn_expected(hi) << 16) | bf16_rn_expected(lo) for lo, hi, _ in rows]
    assert [f"{v:08x}" for v in emu_op("pack", rows)] == [f"{v:08x}" for v in want]



def test_float2bfloat16_rn_rounds_as_the_pair_conversion(emu_op):
    """The scalar conversion (cvt.rn.bf16.f32 on the GPU) rounds as the pair's does, any NaN to 0x7FFF."""
    rows = [(b, 0, 0) for b in BF16_SPECIAL]
    assert [f"{v:04x}" for v in emu_op("one", rows)] == [f"{v:04x}" for v in BF16_SPECIAL.values()]

def test_max_bf16x2(emu_op):
    halves = [0x0000, 0x8000, 0x3F80, 0xBF80, 0x3F81, 0x7F80, 0xFF80, 0x7F7F, 0x0001, 0x8001, 0x7FC0, 0xFFC0, 0x7F81, 0x7FFF]
    pairs = [(a, b) for a in halves for b in halves]
    rows = [((a << 16) | b, (b << 16) | a, 0) for a, b in pairs]  # each order in one half or the other
    want = [(bf16_max_expected(a, b) << 16) | bf16_max_expected(b, a) for a, b in pairs]
    assert bf16_max_expected(0x7FC0, 0x3F80) == 0x3F80 and bf16_max_expected(0x0000, 0x8000) == 0x0000
    assert [f"{v:08x}" for v in emu_op("max", rows)] == [f"{v:08x}" for v in want]


def test_inline_ptx_is_rewritten_or_rejected(tmp_path):
    """A modelled statement becomes its model whatever its spacing; comments and strings are left
    alone; other PTX (or the same instruction with other constraints) becomes a function that g++
    rejects, by name, wherever it is compiled in."""
    out = runner._emulated_source(OPS + '// asm("max.bf16x2 %0, %1, %2;" : "=r"(x));\nconst char* s = "asm(";\n')
    assert "(w) = emu_cvt_rn_bf16x2_f32((hi), (lo));" in out and "(d) = emu_max_bf16x2((a), (b));" in out
    assert '// asm("max.bf16x2 %0, %1, %2;" : "=r"(x));' in out and 'const char* s = "asm(";' in out
    assert out.count("\n") == (OPS + "\n\n").count("\n") + 1  # one declaration, every line kept
    assert "emu_unmodelled_asm_0();" in out and "tanh.approx.f32" in out.splitlines()[0]
    other = runner._emulated_source('asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=h"(w) : "f"(a), "f"(b));')
    assert "emu_unmodelled_asm_0();" in other
    if shutil.which("g++") is None:
        pytest.skip("the emulator needs g++")
    called = OPS.replace("std::cout << std::hex << r", "std::cout << never_called(1.0f) << std::hex << r")
    assert called != OPS
    exe, err = build_ops(tmp_path, called)
    assert exe is None and "inline PTX the emulator does not model" in err and "tanh.approx.f32" in err, err
