"""`workbench new`: a scaffolded family loads, makes cases, compiles and passes its own tests."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from workbench.check import make_case
from workbench.compile import compile_only
from workbench.errors import WorkbenchError
from workbench.family import Project
from workbench.scaffold import scaffold

from conftest import ROOT

NAME = "scale_shift"


@pytest.fixture
def project(tmp_path):
    """A bare project root (no kernels/ or references/ yet) with the new family in it."""
    paths = scaffold(tmp_path, NAME)
    return tmp_path, paths


def test_it_writes_the_four_files(project):
    root, paths = project
    assert [p.relative_to(root).as_posix() for p in paths] == [
        f"kernels/{NAME}/family.toml", f"kernels/{NAME}/1_naive.cu", f"references/{NAME}.py", f"tests/test_{NAME}.py"]
    assert all(p.is_file() and p.stat().st_size > 100 for p in paths)
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []


def test_the_contract_loads_and_makes_cases(project):
    root, _ = project
    fam = Project(root).family(NAME)
    assert fam.default_sizes == {"N": 1 << 24}
    assert [s["N"] for s in fam.test_sizes] == [1, 31, 1000003]
    assert fam.bytes_moved(fam.default_sizes) == 8 << 24 and fam.flops is None
    assert fam.torch == "alpha * inp + beta" and fam.torch_outputs == ("out",)
    [version] = fam.versions
    assert version.number == 1 and version.title and version.changed and version.why
    assert version.block_sizes == (128, 256, 512, 1024) and version.kernels == [f"{NAME}1"]
    for i, sizes in enumerate(fam.test_sizes):
        case = make_case(fam, sizes, i)
        inp = case.inputs["inp"].astype("float64")
        assert case.expected["out"] == pytest.approx(2.0 * inp + 0.5)


def test_version_1_compiles_for_sm_90(project, nvcc):
    root, _ = project
    resources, _ = compile_only(Project(root).family(NAME).version(1).path, "sm_90")
    assert list(resources) == [f"{NAME}1"]
    assert resources[f"{NAME}1"].spill_stores == 0


def test_the_generated_tests_pass_in_the_new_project(project):
    root, _ = project
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("WORKBENCH_ROOT", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"tests/test_{NAME}.py"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = int(re.search(r"(\d+) passed", done.stdout).group(1))
    assert passed >= (3 if shutil.which("nvcc") else 2), done.stdout  # the GPU test skips without a GPU


def test_an_existing_family_is_refused_naming_the_file(project):
    root, paths = project
    paths[0].write_text(paths[0].read_text() + "# my edit\n")
    with pytest.raises(WorkbenchError, match=rf"kernels/{NAME}/family.toml exists already \(--force") as e:
        scaffold(root, NAME)
    assert "\n" not in str(e.value)
    assert "# my edit" in paths[0].read_text(), "refused: nothing overwritten"
    scaffold(root, NAME, force=True)
    assert "# my edit" not in paths[0].read_text()


def test_an_existing_reference_or_test_of_that_name_is_refused(tmp_path):
    (tmp_path / "references").mkdir()
    (tmp_path / "references" / "check.py").write_text("")
    with pytest.raises(WorkbenchError, match="references/check.py exists already"):
        scaffold(tmp_path, "check")
    assert not (tmp_path / "kernels" / "check").exists(), "nothing written when refused"
    # in the repository itself: a family and a test module that exist
    with pytest.raises(WorkbenchError, match="kernels/layernorm_forward/family.toml exists already"):
        scaffold(ROOT, "layernorm_forward")


def test_another_version_1_is_in_the_way_even_with_force(project):
    root, _ = project
    other = root / "kernels" / NAME / "1_other.cu"
    other.write_text("/* */")
    with pytest.raises(WorkbenchError, match=rf"kernels/{NAME}/1_other.cu claims version 1 already"):
        scaffold(root, NAME, force=True)


@pytest.mark.parametrize("name", ["", "Scale", "2scale", "scale-shift", "scale shift", "_scale", "class",
                                  "common", "a/b", "scale\n"])
def test_bad_names_are_refused_in_one_line(tmp_path, name):
    with pytest.raises(WorkbenchError, match="bad family name") as e:
        scaffold(tmp_path, name)
    assert "\n" not in str(e.value).replace(repr(name), "")
    assert not any(tmp_path.iterdir()), "nothing written"


def test_force_never_touches_a_family_the_project_ships(monkeypatch):
    """`new gelu_forward --force` once overwrote the real family: refused now, in one line, exit 2."""
    import workbench.scaffold as sc
    from click.testing import CliRunner
    from workbench.cli import cli

    def no_writes(path, text):
        raise AssertionError(f"--force wrote {path}")
    monkeypatch.setattr(sc, "write_atomically", no_writes)  # a regression fails here, writing nothing
    with pytest.raises(WorkbenchError, match="--force only replaces the files of a family that `workbench new` made") as e:
        scaffold(ROOT, "gelu_forward", force=True)
    assert e.value.exit_code == 2 and "2_packed128.cu" in str(e.value)
    r = CliRunner().invoke(cli, ["new", "gelu_forward", "--force"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.output
    assert "Traceback" not in r.output and "--force only replaces" in lines[0]


def test_force_refuses_a_family_with_more_versions_or_a_contract_new_did_not_write(project):
    root, paths = project
    toml, v1 = paths[0], paths[1]
    v2 = root / "kernels" / NAME / "2_faster.cu"
    v2.write_text(v1.read_text())
    with pytest.raises(WorkbenchError, match=r"holds versions `new` did not write \(2_faster.cu\)"):
        scaffold(root, NAME, force=True)
    v2.unlink()
    toml.write_text(toml.read_text().split("\n", 1)[1])  # a contract by hand: no `workbench new` line
    mine = toml.read_text()
    with pytest.raises(WorkbenchError, match="family.toml was not written by `workbench new`"):
        scaffold(root, NAME, force=True)
    assert toml.read_text() == mine, "nothing overwritten"


def test_force_refuses_a_family_git_tracks(project):
    root, paths = project
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True, timeout=60)
    subprocess.run(["git", "add", "kernels"], cwd=root, check=True, timeout=60)
    with pytest.raises(WorkbenchError, match=rf"git tracks kernels/{NAME}/family.toml"):
        scaffold(root, NAME, force=True)
