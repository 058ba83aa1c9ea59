"""Every version compiles with the nvcc on PATH, for Ampere and Hopper, without a GPU."""

import re

import pytest

from workbench.compile import compile_only
from workbench.errors import CompileError
from workbench.family import Project

from conftest import ROOT

VERSIONS = [v for fam in Project(ROOT).families() for v in fam.versions]


# sm_90a (the H100 and H200, wgmma included) in the default run; sm_80 (an A100: portability) with
# the slow cases, which CI runs too.
@pytest.mark.parametrize("arch", [pytest.param("sm_80", marks=pytest.mark.slow), "sm_90a"])
@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: f"{v.family.name}-{v.number}")
def test_every_version_compiles(nvcc, version, arch):
    resources, _ = compile_only(version.path, arch)
    for kernel in version.kernels:
        assert any(k == kernel or k.startswith(f"_Z{len(kernel)}{kernel}") for k in resources), \
            f"{version.path.name}: launch names kernel {kernel!r}, which the file does not define"


def test_a_compile_error_points_at_the_versions_own_file_and_line(nvcc, tmp_path):
    bad = tmp_path / "kernels" / "f" / "1_bad.cu"
    bad.parent.mkdir(parents=True)
    bad.write_text('/*\ntitle = "bad"\n*/\nextern "C" __global__ void k(float* y) {\n    y[0] = undefined_name;\n}\n')
    with pytest.raises(CompileError) as e:
        compile_only(bad, "sm_90")
    assert "1_bad.cu(5)" in str(e.value) and "undefined_name" in str(e.value)


def test_resources_are_parsed(nvcc):
    v = Project(ROOT).family("layernorm_forward").version(5)
    res, _ = compile_only(v.path, "sm_90")
    r = res["layernorm_forward5"]
    assert r.registers > 0 and r.shared >= 32 * 4  # the per-warp slots


def test_compile_without_nvcc_says_so_once(monkeypatch):
    import shutil
    from click.testing import CliRunner
    from workbench.cli import cli
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "nvcc" else real(name, *a, **k))
    r = CliRunner().invoke(cli, ["compile", "layernorm_forward"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 1 and lines == ["error: nvcc is not on PATH: install the CUDA toolkit to compile "
                                          "without a GPU"], r.output


def test_the_compile_table_wraps_at_80_columns_instead_of_cutting(monkeypatch):
    """CliRunner's console is 80 columns: every header word whole, no cell cut with an ellipsis."""
    import workbench.compile as wc
    from click.testing import CliRunner
    from workbench.cli import cli
    from workbench.compile import Resources
    kernel = "layernorm_forward_kernel_with_a_long_name"
    monkeypatch.setattr(wc, "require_nvcc", lambda: "nvcc", raising=False)
    monkeypatch.setattr(wc, "compile_only", lambda path, arch: ({kernel: Resources(40, 8, 4, 16, 132)}, ""))
    r = CliRunner().invoke(cli, ["compile", "layernorm_forward", "10"])
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    words = set(r.output.split())
    for header in ("version", "arch", "kernel", "regs", "spills (st/ld B)", "stack B", "static smem B"):
        assert set(header.split()) <= words, header
    column = [line.split("│")[3].strip() for line in r.output.splitlines() if line.startswith("│")]
    assert "".join(column) == kernel, column  # folded over lines, all of it there


def test_a_device_of_compute_capability_9_builds_for_sm_90a():
    from workbench.compile import sm_arch
    assert sm_arch("9.0") == "sm_90a"  # wgmma and setmaxnreg exist only there
    assert sm_arch("8.0") == "sm_80" and sm_arch("8.6") == "sm_86"


def _ptx(nvcc, path, arch, tmp_path):
    import subprocess
    from workbench.compile import flags, include_dirs
    out = tmp_path / f"{arch}.ptx"
    subprocess.run([nvcc, "-ptx", f"-arch={arch}", *flags(), *(f"-I{d}" for d in include_dirs(path)),
                    "-o", str(out), str(path)], check=True, capture_output=True, timeout=120)
    return out.read_text()


@pytest.mark.parametrize("number", [12, 13, 14])
def test_the_wgmma_attention_is_hopper_code_and_a_trap_elsewhere(nvcc, tmp_path, number):
    """attention_forward 12, 13 and 14's products are wgmma in the sm_90a build (4 for S, 4 for P V);
    any other build is the stub that traps (their headers say so) rather than code that would
    compute something else. 13 and 14 hand their tiles over through mbarriers, fed by their copies."""
    v = Project(ROOT).family("attention_forward").version(number)
    hopper = _ptx(nvcc, v.path, "sm_90a", tmp_path)
    assert hopper.count("wgmma.mma_async") == 8 and "fence.proxy.async" in hopper and "trap;" not in hopper
    if number >= 13:
        assert "cp.async.mbarrier.arrive.noinc" in hopper and "mbarrier.try_wait.parity" in hopper
        assert "bar.sync" in hopper and hopper.count("bar.sync") == 1  # the one barrier: after the mbarriers' init
    ampere = _ptx(nvcc, v.path, "sm_80", tmp_path)
    assert "wgmma" not in ampere and "trap;" in ampere


def test_attention_forward_15_is_one_warpgroup_with_three_blocks_an_sm(nvcc, tmp_path):
    """Version 15: one warpgroup a block fetching its own tiles: no mbarrier, no producer warps,
    one block barrier a tile; S is two 64-key halves and P V eight steps (a 128-key tile: 16
    wgmma) or one half at a query tile's diagonal (8). Three blocks of 128 threads an SM allow
    168 registers: no spills and no advisory, or S and O would not stay in registers."""
    from workbench.compile import compile_only
    v = Project(ROOT).family("attention_forward").version(15)
    hopper = _ptx(nvcc, v.path, "sm_90a", tmp_path)
    assert hopper.count("wgmma.mma_async") == 24 and "mbarrier" not in hopper
    assert "cp.async.cg.shared.global" in hopper and hopper.count("bar.sync") == 1
    resources, said = compile_only(v.path, "sm_90a")
    main = resources["attention_forward15"]
    assert "Potential Performance Loss" not in said, said
    assert main.registers <= 168 and main.spill_stores == 0 and main.spill_loads == 0
    assert _ptx(nvcc, v.path, "sm_80", tmp_path).count("trap;") >= 1


@pytest.mark.parametrize("number, products", [(12, 20), (13, 40), (14, 40), (15, 40)])
def test_the_wgmma_attention_backward_is_hopper_code_and_a_trap_elsewhere(nvcc, tmp_path, number, products):
    """attention_backward 12-15 run every product on wgmma: S^T, dP^T, dV, dK and dQ, four
    16-key or 16-query steps each a 64-query tile (13-15: two halves, and dQ over 128 keys); the
    scratch kernels around them build anywhere, the main one is a trap off a Hopper. 12 and 13 add
    dQ with float atomics; 14 and 15 hand the running sum over by tickets (acquire, release) and
    have no float atomic at all, which is what makes them deterministic. 15 has no prep kernel:
    a memset step zeroes its tickets and flags, and the main kernel reads out for D itself."""
    v = Project(ROOT).family("attention_backward").version(number)
    hopper = _ptx(nvcc, v.path, "sm_90a", tmp_path)
    assert hopper.count("wgmma.mma_async") == products and "ldmatrix.sync.aligned.m8n8.x4.trans" in hopper
    float_atomics = re.findall(r"(?m)^\s*(?:red|atom)\.[a-z0-9.:]*f32", hopper)  # instructions, not names
    if number >= 14:
        assert not float_atomics and v.deterministic
        assert "ld.acquire.gpu.global" in hopper and "red.release.gpu.global.add.s32" in hopper
    else:
        assert float_atomics and not v.deterministic
    ampere = _ptx(nvcc, v.path, "sm_80", tmp_path)
    assert "wgmma" not in ampere and "trap;" in ampere
    if number == 15:
        assert "_prep" not in ampere and [s.kind for s in v.steps] == ["memset", "kernel"]
        assert "out" in v.steps[1].args
    else:
        assert f"attention_backward{number}_prep" in ampere


def test_ptxas_serialises_the_wgmma_of_attention_forward_13_and_not_14(nvcc):
    """Version 14 exists for this line of ptxas's: 13 leaves a P V in flight across its loop's
    exit and is built with every wgmma serialised (C7515); 14 waits for it at once and is not.
    Any advisory at all for 14 (registers: C7512, a divergent wait: C7518) would undo it."""
    from workbench.compile import compile_only
    family = Project(ROOT).family("attention_forward")
    _, said13 = compile_only(family.version(13).path, "sm_90a")
    resources, said14 = compile_only(family.version(14).path, "sm_90a")
    assert "(C7515)" in said13
    assert "Potential Performance Loss" not in said14, said14
    assert resources["attention_forward14"].registers <= 102  # two blocks of 320 threads an SM


@pytest.mark.parametrize("number", [12, 13, 14, 15])
def test_ptxas_keeps_the_wgmma_backward_asynchronous(nvcc, number):
    """No performance advisory for the wgmma backward either (serialised wgmma: C7515 / C7512),
    and no spills at its one block an SM."""
    from workbench.compile import compile_only
    resources, said = compile_only(Project(ROOT).family("attention_backward").version(number).path, "sm_90a")
    assert "Potential Performance Loss" not in said, said
    main = resources[f"attention_backward{number}"]
    assert main.spill_stores == 0 and main.spill_loads == 0 and main.registers <= 255


PTXAS_SAID = """ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to non wgmma instructions defining accumulator registers of a wgmma between start and end of the pipeline stage in the function 'k'
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers"""


def test_ptxas_performance_advisories_are_kept_with_the_warnings_and_its_resource_chatter_is_not():
    from workbench.compile import diagnostics
    kept = diagnostics(PTXAS_SAID)
    assert kept.splitlines() == [PTXAS_SAID.splitlines()[0]]  # the serialised wgmma, and only it
