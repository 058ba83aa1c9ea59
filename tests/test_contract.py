import textwrap
from pathlib import Path

import pytest

from workbench.errors import ContractError, SizesError, UnknownName
from workbench.family import Project

from conftest import ROOT

GOOD_FAMILY = """
title = "scale"
sizes = ["N"]
default_sizes = { N = 10 }
test_sizes = [ { N = 3 } ]
tolerance = { atol = 1e-6, rtol = 1e-6 }
bytes = "8 * N"
args = [
  { name = "y", role = "out", shape = "N" },
  { name = "x", role = "in", shape = "N", init = "normal(0, 1)" },
]
"""

GOOD_VERSION = """/*
title = "plain"
block_sizes = [128]
[[launch]]
kernel = "k"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["y", "x", "N"]
*/
extern "C" __global__ void k(float* y, const float* x, int N) {}
"""


def make_project(tmp_path: Path, family: str = GOOD_FAMILY, versions: dict | None = None) -> Project:
    fam = tmp_path / "kernels" / "scale"
    fam.mkdir(parents=True)
    (fam / "family.toml").write_text(textwrap.dedent(family))
    for name, text in (versions if versions is not None else {"1_plain.cu": GOOD_VERSION}).items():
        (fam / name).write_text(text)
    return Project(tmp_path)


def test_the_layernorm_contract_loads_with_six_versions():
    fam = Project(ROOT).family("layernorm_forward")
    assert fam.default_sizes == {"B": 8, "T": 1024, "C": 768}
    assert [v.number for v in fam.versions] == list(range(1, len(fam.versions) + 1))
    assert len(fam.versions) >= 6
    assert fam.bytes_moved({"B": 8, "T": 1024, "C": 768}) == 4 * (2 * 8192 * 768 + 2 * 768 + 2 * 8192)
    assert any(s["C"] % 4 for s in fam.test_sizes), "test sizes must include C not a multiple of 4"


def test_every_version_of_every_family_has_a_story():
    for fam in Project(ROOT).families():
        for v in fam.versions:
            assert v.title and v.steps, v.path
            if v.number > 1:
                assert v.changed and v.why, f"{v.path}: say what changed and why it should be faster"


def test_a_good_family_loads(tmp_path):
    fam = make_project(tmp_path).family("scale")
    v = fam.version(1)
    assert v.kernels == ["k"] and v.block_sizes == (128,)


@pytest.mark.parametrize("broken, message", [
    (GOOD_FAMILY.replace('title = "scale"', ""), "missing required key 'title'"),
    (GOOD_FAMILY.replace('role = "out"', 'role = "output"'), "role must be one of"),
    (GOOD_FAMILY.replace('"8 * N"', '"8 * M"'), "unknown name"),
    (GOOD_FAMILY.replace(', init = "normal(0, 1)"', ""), "needs an 'init'"),
    (GOOD_FAMILY.replace("{ N = 3 }", "{ N = 0 }"), "positive integers"),
    (GOOD_FAMILY + "\nbogus = 1\n", "unknown key"),
    ("title = [", "family.toml"),
])
def test_a_malformed_contract_names_the_problem(tmp_path, broken, message):
    project = make_project(tmp_path, broken)
    with pytest.raises(ContractError, match=message):
        project.family("scale")


@pytest.mark.parametrize("broken, message", [
    (GOOD_VERSION.replace("block_sizes = [128]\n", ""), "must list block_sizes"),
    (GOOD_VERSION.replace('"cdiv(N, block_size)"', '"cdiv(M, block_size)"'), "unknown name"),
    (GOOD_VERSION.replace("/*", "// no header"), "opens with a /\\* ... \\*/ comment"),
    (GOOD_VERSION.replace('kernel = "k"', 'kernel = "k"\nmemset = "y"'), "exactly one of"),
    (GOOD_VERSION.replace('title = "plain"', 'title = "plain'), "not valid TOML"),
    (GOOD_VERSION.replace('args = ["y", "x", "N"]', 'args = ["tma:z, N, 1, 8, 8", "y", "x", "N"]'),
     "'z' is not one of the version's buffers"),
    (GOOD_VERSION.replace('args = ["y", "x", "N"]', 'args = ["tma:x, N, 1, 8", "y", "x", "N"]'),
     "tma:BUFFER, ROWS, COLS, BOX_ROWS, BOX_COLS"),
    (GOOD_VERSION.replace('args = ["y", "x", "N"]', 'args = ["tma:x, M, 1, 8, 8", "y", "x", "N"]'), "unknown name"),
])
def test_a_malformed_version_header_names_the_problem(tmp_path, broken, message):
    project = make_project(tmp_path, versions={"1_plain.cu": broken})
    with pytest.raises(ContractError, match=message):
        project.family("scale").versions


def test_two_files_claiming_one_version_are_refused(tmp_path):
    project = make_project(tmp_path, versions={"1_a.cu": GOOD_VERSION, "1_b.cu": GOOD_VERSION})
    with pytest.raises(ContractError, match="two files claim version 1"):
        project.family("scale").versions


def test_unknown_family_and_version_list_what_exists(tmp_path):
    project = make_project(tmp_path)
    with pytest.raises(UnknownName, match=r"families: scale"):
        project.family("nope")
    with pytest.raises(UnknownName, match=r"versions: 1"):
        project.family("scale").version(7)


def test_sizes_parsing(tmp_path):
    fam = make_project(tmp_path).family("scale")
    assert fam.parse_sizes("N=7") == {"N": 7}
    for bad in ("M=3", "N=x", "N", "N=-1"):
        with pytest.raises(SizesError):
            fam.parse_sizes(bad)


def test_version_preconditions_are_reported_not_ignored():
    fam = Project(ROOT).family("layernorm_forward")
    v6 = fam.version(6)
    assert v6.unmet({"B": 1, "T": 1, "C": 37}) == ["C % 4 == 0"]
    assert v6.unmet({"B": 8, "T": 1024, "C": 768}) == []


def with_emulate(tables: str) -> str:
    return GOOD_VERSION.replace("*/", textwrap.dedent(tables) + "*/")


def test_an_emulate_table_gives_its_runs_and_sizes(tmp_path):
    v = make_project(tmp_path, versions={"1_plain.cu": with_emulate("""
        [[emulate]]
        runs = ["seed=2 EARLY SHUFFLE order=5 sms=1 sched_seed=3"]
        [[emulate]]
        sizes = ["test", { N = 7 }]
        when = "N > 3"
        runs = ["bs=128"]
        """)}).family("scale").version(1)
    first, second = v.emulate
    assert first.test_sizes and first.sizes == () and first.when is None
    (run,) = first.runs
    assert (run.block_size, run.seed, run.mode, run.sched, run.order, run.sms, run.sched_seed) == \
        (128, 2, "EARLY", "SHUFFLE", 5, 1, 3)
    assert second.test_sizes and second.sizes == ({"N": 7},) and second.when == "N > 3"
    assert (second.runs[0].seed, second.runs[0].mode, second.runs[0].sched, second.runs[0].sms) == (0, "LATE", "PRIORITY", 132)
    assert not first.slow and not second.slow


def test_an_emulate_table_may_leave_its_cases_to_the_slow_run(tmp_path):
    v = make_project(tmp_path, versions={"1_plain.cu": with_emulate("""
        [[emulate]]
        slow = true
        runs = ["seed=0"]
        """)}).family("scale").version(1)
    (table,) = v.emulate
    assert table.slow


@pytest.mark.parametrize("table, message", [
    ('runs = ["seed=1 FAST"]', "unknown word 'FAST'"),
    ('runs = ["bs=256"]', "block size 256 is not in block_sizes"),
    ('runs = ["seed=1 seed=2"]', "gives its seed twice"),
    ('runs = ["LATE EARLY"]', "gives its mode twice"),
    ('runs = []', "runs is empty"),
    ('sizes = [{ M = 3 }]\nruns = ["seed=0"]', "expected positive integers for exactly N"),
    ('sizes = ["test", "test"]\nruns = ["seed=0"]', 'at most once "test"'),
    ('when = "M > 1"\nruns = ["seed=0"]', "unknown name(s) M"),
    ('runs = ["seed=0"]\nblocks = 2', "unknown key(s) blocks"),
    ('slow = "yes"\nruns = ["seed=0"]', "slow"),
])
def test_a_bad_emulate_table_is_refused_in_one_line(tmp_path, table, message):
    project = make_project(tmp_path, versions={"1_plain.cu": with_emulate("[[emulate]]\n" + table + "\n")})
    with pytest.raises(ContractError) as e:
        project.family("scale").version(1)
    assert message in str(e.value) and "\n" not in str(e.value) and "emulate[0]" in str(e.value)
