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
import sys
import textwrap
from pathlib import Path

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
