"""Every version compiles with the nvcc on PATH, for Ampere and Hopper, without a GPU."""

import pytest

from workbench.compile import compile_only
from workbench.errors import CompileError
from workbench.family import Project

from conftest import ROOT

VERSIONS = [v for fam in Project(ROOT).families() for v in fam.versions]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
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
