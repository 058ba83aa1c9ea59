"""`workbench profile` on the GPU (marked gpu; skipped without one, or without ncu): the metrics of
real versions under ncu are there and plausible, one kernel per launch step of ours, a library
call's kernels found without knowing their names, and the CLI's table and JSON."""

import json
import os
import shutil
import sys

import pytest

from workbench import profile
from workbench.family import Project

from conftest import ROOT, bounded

pytestmark = pytest.mark.gpu
PROJECT = Project(ROOT)


@pytest.fixture(scope="module")
def ncu():
    path = shutil.which("ncu")
    if path is None:
        pytest.skip("ncu (Nsight Compute) is not on PATH")
    return path


def profiled(ncu, family, number, block_size=None):
    v = PROJECT.family(family).version(number)
    p = profile.profile_version(ROOT, v, v.family.default_sizes, block_size, ncu, timeout=300)
    assert p.status == "profiled", f"{p.label}: {p.status}: {p.reason}"
    return p


def plausible(k):
    assert k.duration_us is not None and k.duration_us > 0
    for name, pct in (("dram", k.dram_pct), ("sm", k.sm_pct), ("occupancy", k.occupancy_pct)):
        assert pct is not None and 0 <= pct <= 100.5, (name, pct)
    # A profile of layernorm_forward 4 on the H100 (36594e3) failed the old common bound with one
    # value of 103.5 (the message did not say which; a rerun passed, the L2 hit rate at 52.6%). Of
    # the four, only ncu's L2 hit rate (lts__t_sector_hit_rate.pct) is a ratio of two counters that
    # is not capped at 100, so it gets room; the others must stay within 100.5 and say their name.
    assert k.l2_hit_pct is not None and 0 <= k.l2_hit_pct <= 110, k.l2_hit_pct
    assert k.registers is not None and k.registers > 0
    assert k.sm_clock_ghz is not None and 0.5 < k.sm_clock_ghz < 3.0
    assert k.stalls and all(s.cycles > 0 and 0 < s.share <= 100 for s in k.stalls)


def test_layernorm_forward_4_profiles_as_one_kernel_with_the_registers_ptxas_gave(ncu):
    p = profiled(ncu, "layernorm_forward", 4, 256)
    [k] = p.kernels  # the warm-up launch and the workbench's own kernels are not profiled
    assert k.name == "layernorm_forward4" and k.block == "(256, 1, 1)"
    plausible(k)
    assert k.dram_pct > 5  # a memory-bound kernel at 8x1024x768 floats
    assert k.registers == p.resources["layernorm_forward4"]["registers"]
    assert p.duration_us == k.duration_us
    assert any(r.type == "OPT" for r in k.rules)


def test_a_version_of_three_kernels_shows_each_in_launch_order(ncu):
    p = profiled(ncu, "layernorm_forward", 2, 256)
    assert [k.name for k in p.kernels] == ["row_mean", "row_rstd", "normalize"]
    for k in p.kernels:
        plausible(k)
    assert p.duration_us == pytest.approx(sum(k.duration_us for k in p.kernels))


def test_a_library_calls_kernels_are_profiled_too(ncu):
    p = profiled(ncu, "matmul_forward", 4)  # cuBLAS's GEMM, then the version's own bias kernel
    assert len(p.kernels) >= 2
    ours = set(PROJECT.family("matmul_forward").version(4).kernels)  # its bias kernels (one runs)
    names = [k.name for k in p.kernels]
    assert len(ours & set(names)) == 1 and names[-1] in ours
    assert any(n not in ours for n in names)  # cuBLAS's, whatever its name
    harness = ("compare_", "ramp_f32", "read_all", "busy_wait")  # the workbench's own: never profiled
    assert not any(n.startswith(harness) for n in names)


def test_the_cli_shows_two_versions_and_writes_the_json(ncu, tmp_path):
    """As a user runs it (a process of its own: the table goes to the terminal's stdout)."""
    out = tmp_path / "prof.json"
    r = bounded([sys.executable, "-m", "workbench", "profile", "layernorm_forward", "3", "4", "--json", str(out)],
                300, env={**os.environ, "COLUMNS": "200"}, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "layernorm_forward 3" in r.stdout and "layernorm_forward 4" in r.stdout and "locked to base" in r.stdout
    assert "long_scoreboard" in r.stdout  # the stall reasons, as ncu names them
    data = json.loads(out.read_text())
    assert [v["version"] for v in data["versions"]] == [3, 4]
    assert all(v["status"] == "profiled" and v["kernels"] for v in data["versions"])
