"""The course's layout, as a reader of version N meets it: kernels/common/ holds only helpers that
several families use (a family's own live in its folder), every version names the version it
builds on, and every version's story (`why`) is short; measurements live in results/notes/."""

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT
from test_contract import GOOD_FAMILY, GOOD_VERSION, make_project
from workbench.cli import cli
from workbench.compile import INCLUDE
from workbench.errors import ContractError
from workbench.family import Project

COMMON = ROOT / "kernels" / "common"
TRAINER_KERNELS = ROOT / "train" / "kernels"
MAX_WHY_LINES = 30
PROJECT = Project(ROOT)


def local_headers(path: Path, seen: set[Path] | None = None) -> set[Path]:
    """The local headers `path` includes, directly or through one another, resolved as nvcc does
    for a version: the including file's folder, then kernels/common/."""
    seen = set() if seen is None else seen
    for name in INCLUDE.findall(path.read_text()):
        for folder in (path.parent, COMMON):
            if (folder / name).is_file():
                if folder / name not in seen:
                    seen.add(folder / name)
                    local_headers(folder / name, seen)
                break
    return seen


def users_of_common() -> dict[str, set[str]]:
    """Each kernels/common header: the families whose versions include it, directly or through
    another header. (The trainer's kernels, train/kernels/, are promoted copies with every local
    header inlined: they include none, so the versions are the only users.)"""
    users: dict[str, set[str]] = {h.name: set() for h in COMMON.glob("*.cuh")}
    for fam in PROJECT.families():
        for v in fam.versions:
            for h in local_headers(v.path):
                if h.parent == COMMON:
                    users[h.name].add(fam.name)
    return users


def test_kernels_common_holds_only_helpers_that_several_families_use():
    alone = {name: sorted(fams) for name, fams in users_of_common().items() if len(fams) < 2}
    assert not alone, (f"kernels/common/ headers used by fewer than two families (move each into its "
                       f"family's folder): {alone}")


def test_the_trainers_kernels_include_no_local_header():
    for frozen in TRAINER_KERNELS.glob("*.cu"):
        assert not local_headers(frozen), f"{frozen.name} is not self-contained"


def test_a_family_folder_holds_only_its_own_helpers():
    """A header in kernels/<family>/ is included by that family's versions only, and by one of
    them at least."""
    for fam in PROJECT.families():
        own = set(fam.path.glob("*.cuh"))
        used = set().union(*(local_headers(v.path) for v in fam.versions))
        assert own <= used, f"{fam.name}: headers no version includes: {sorted(p.name for p in own - used)}"
        for other in PROJECT.families():
            if other.name != fam.name:
                for v in other.versions:
                    assert not own & local_headers(v.path), f"{v.label} reaches into {fam.name}'s folder"


def test_encoder_backwards_counting_sort_is_written_once():
    fam = PROJECT.family("encoder_backward")
    for n in (2, 3, 4):
        v = fam.version(n)
        assert fam.path / "bucket_sort.cuh" in local_headers(v.path), v.label
        assert "block_exclusive_scan" not in v.source and "void count_tokens" not in v.source, v.label


def test_every_version_names_the_version_it_builds_on():
    for fam in PROJECT.families():
        numbers = {v.number for v in fam.versions}
        for v in fam.versions:
            if v.number == 1:
                assert not v.builds_on, v.label
                continue
            assert v.builds_on is not None, f"{v.path}: say which version it builds on (builds_on = N, 0: afresh)"
            assert v.builds_on == 0 or (v.builds_on < v.number and v.builds_on in numbers), v.label


def test_every_versions_story_is_short():
    long = [f"{v.label} ({len(v.why.splitlines())} lines)" for fam in PROJECT.families() for v in fam.versions
            if len(v.why.splitlines()) > MAX_WHY_LINES]
    assert not long, f"stories over {MAX_WHY_LINES} lines (measurements go to results/notes/): {long}"


def test_every_family_with_moved_notes_has_its_notes_file():
    """A version whose story says its measurements are in results/notes/ has them there, under
    its own heading."""
    for fam in PROJECT.families():
        for v in fam.versions:
            if "results/notes/" in v.why:
                notes = ROOT / "results" / "notes" / f"{fam.name}.md"
                assert notes.is_file(), f"{v.label} points at {notes}"
                assert re.search(rf"^## {fam.name} {v.number}\b", notes.read_text(), re.M), v.label


# -- the field's checks: one line each --------------------------------------------------------------
def versions(**headers):
    """Version files for a project: {number: extra header lines}."""
    return {f"{n}_v{n}.cu": GOOD_VERSION.replace('title = "plain"\n', f'title = "plain"\n{extra}\n')
            for n, extra in headers.items()}


@pytest.mark.parametrize("line, message", [
    ("builds_on = 2", "lower-numbered version"),
    ("builds_on = 3", "lower-numbered version"),
    ("builds_on = -1", "lower-numbered version"),
    ('builds_on = "1"', "lower-numbered version"),
    ("builds_on = true", "lower-numbered version"),
])
def test_a_bad_builds_on_is_refused_in_one_line(tmp_path, line, message):
    project = make_project(tmp_path, GOOD_FAMILY, {"1_v1.cu": GOOD_VERSION, **versions(**{"2": line})})
    with pytest.raises(ContractError, match=message) as e:
        project.family("scale").versions
    assert "\n" not in str(e.value)


def test_builds_on_must_name_an_existing_version(tmp_path):
    project = make_project(tmp_path, GOOD_FAMILY, {"1_v1.cu": GOOD_VERSION, **versions(**{"3": "builds_on = 2"})})
    with pytest.raises(ContractError, match=r"builds_on = 2 names no version of scale \(versions: 1, 3\)"):
        project.family("scale").versions


def test_builds_on_is_read(tmp_path):
    files = {"1_v1.cu": GOOD_VERSION, **versions(**{"2": "builds_on = 1", "3": "builds_on = 0", "4": ""})}
    fam = make_project(tmp_path, GOOD_FAMILY, files).family("scale")
    assert [v.builds_on for v in fam.versions] == [None, 1, 0, None]


def test_show_and_diff_use_it():
    r = CliRunner().invoke(cli, ["show", "gelu_forward", "4"])
    assert r.exit_code == 0, r.output
    assert re.search(r"builds on +gelu_forward 3", r.output)
    one = CliRunner().invoke(cli, ["diff", "gelu_forward", "4", "--stat"])
    two = CliRunner().invoke(cli, ["diff", "gelu_forward", "3", "4", "--stat"])
    assert one.exit_code == 0 and one.output == two.output, one.output
    r = CliRunner().invoke(cli, ["diff", "gelu_forward", "1"])
    assert r.exit_code == 2 and "builds on no earlier version" in r.output and "Traceback" not in r.output


# -- arch: a version that is one arch's code only ---------------------------------------------------
@pytest.mark.parametrize("line", ['arch = "90a"', 'arch = "sm_90a sm_80"', "arch = 90", 'arch = "compute_90a"'])
def test_a_bad_arch_is_refused_in_one_line(tmp_path, line):
    project = make_project(tmp_path, GOOD_FAMILY, {"1_v1.cu": GOOD_VERSION, **versions(**{"2": line})})
    with pytest.raises(ContractError, match="arch") as e:
        project.family("scale").versions
    assert "\n" not in str(e.value)


def test_arch_is_read_and_says_why_another_device_cannot_run_the_version(tmp_path):
    fam = make_project(tmp_path, GOOD_FAMILY, {"1_v1.cu": GOOD_VERSION, **versions(**{"2": 'arch = "sm_90a"'})}) \
        .family("scale")
    any_arch, hopper = fam.versions
    assert any_arch.arch is None and any_arch.arch_refusal("sm_80") is None
    assert hopper.arch == "sm_90a" and hopper.arch_refusal("sm_90a") is None
    assert "needs sm_90a" in hopper.arch_refusal("sm_80") and "sm_80" in hopper.arch_refusal("sm_80")


def test_the_wgmma_versions_declare_their_arch():
    """Every version built on wgmma.cuh says so in its header (arch), and only those do."""
    project = Project(ROOT)
    for name, numbers in (("attention_forward", [12, 13, 14, 15, 16, 17]), ("attention_backward", [12, 13, 14, 15])):
        fam = project.family(name)
        assert [v.number for v in fam.versions if v.arch == "sm_90a"] == numbers
        assert [v.number for v in fam.versions if '#include "wgmma.cuh"' in v.path.read_text()] == numbers
    r = CliRunner().invoke(cli, ["show", "attention_forward", "13", "--no-source"])
    assert r.exit_code == 0 and re.search(r"arch +sm_90a only", r.output), r.output


def test_a_session_on_another_arch_refuses_the_version_before_making_its_cases(tmp_path):
    from workbench.bench import Options, Session
    project = Project(ROOT)
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        session.device = lambda refresh=False: {"device": {"compute_capability": "8.0"}}  # an A100
        made = []
        session.store.cases = lambda *a, **k: made.append(a)  # must not be reached
        row = session.run_version(project.family("attention_forward").version(13))
    assert row.status == "refused" and "needs sm_90a" in row.reason and "sm_80" in row.reason
    assert made == []


def test_a_child_on_another_arch_refuses_the_version_instead_of_launching_its_stub(monkeypatch):
    """The path of `profile` and of any job a child runs: the provider says why before it loads
    the module (what sm_80 builds of version 13 is a trap)."""
    from workbench import compile as wb_compile
    from workbench.providers import VersionProvider
    monkeypatch.setattr(wb_compile, "device_arch", lambda: "sm_80")
    monkeypatch.setattr(wb_compile, "load_module", lambda *a, **k: pytest.fail("loaded the module"))
    with pytest.raises(ContractError, match=r"attention_forward 13 needs sm_90a .*sm_80"):
        VersionProvider(Project(ROOT).family("attention_forward").version(13))


def test_the_readmes_table_of_families_counts_every_version():
    """README's "Kernel families" table says, per family, how many fp32 versions and how many bf16
    ones the course has: it is kept true to the kernels/ folders (a new version updates it)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## Kernel families", 1)[1].split("\n## ", 1)[0]
    said = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("family", "---"):
            said[cells[0]], said[cells[2]] = cells[1], cells[3]
    want = {}
    for fam in Project(ROOT).families():
        fp32 = sum(v.precision == "fp32" for v in fam.versions)
        bf16 = sum(v.precision == "bf16" for v in fam.versions)
        want[fam.name] = f"{fp32} + {bf16} bf16" if bf16 else str(fp32)
    said.pop("", None)
    assert said == want
