"""workbench sanitize: reading compute-sanitizer's verdicts (CPU), the command line's checks before
any work (CPU), and on the GPU the planted faults of the fixture family caught by the right tool
while the correct version stays clean."""

import json
import shutil

import pytest
from click.testing import CliRunner

from workbench import sanitize
from workbench.cli import cli
from workbench.family import Project

from conftest import FIXTURES

MEMCHECK_ERRORS = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at scale8+0x90
=========     by thread (32,0,0) in block (0,0,0)
=========     Address 0x7f0000000084 is out of bounds
========= ERROR SUMMARY: 3 errors
"""
RACECHECK_HAZARDS = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at scale7+0x40
=========     and Write access at scale7+0x40 [124 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
INITCHECK_LIBRARY = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at 0x1a0 in sgemm_largek_lds64
=========     by thread (0,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""
CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"


# Racecheck of cuBLASLt's bf16 GEMM on the H100 (matmul_forward 6): the tool's own failure, counted
# in its summary (the two lines and the count that run's finding kept).
SANITIZER_BROKE = """========= COMPUTE-SANITIZER
========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware exception.
========= ERROR SUMMARY: 1 error
"""


def test_parse_counts_errors_and_keeps_the_first_reports():
    errors, lines = sanitize.parse(MEMCHECK_ERRORS)
    assert errors == 3
    assert lines and lines[0].startswith("Invalid __global__ write")


def test_parse_names_the_kernel_each_report_happened_in():
    _, lines = sanitize.parse(MEMCHECK_ERRORS)
    assert lines[0].endswith("(at scale8+0x90)"), "a report must say whose kernel it came from"
    _, lines = sanitize.parse(INITCHECK_LIBRARY)
    assert lines == ["Uninitialized __global__ memory read of size 4 bytes (at 0x1a0 in sgemm_largek_lds64)"]


def test_parse_counts_racecheck_hazards():
    errors, lines = sanitize.parse(RACECHECK_HAZARDS)
    assert errors == 1
    assert any("Race reported" in line for line in lines)


def test_parse_keeps_the_sanitizers_last_lines_when_no_report_is_recognised():
    out = ("========= COMPUTE-SANITIZER\n========= Something new happened in a kernel\n"
           "=========     at 0x1f0 in libcublasLt.so\nplain output of the program\n"
           "========= ERROR SUMMARY: 1 error\n")
    errors, lines = sanitize.parse(out)
    assert errors == 1
    assert lines == ["COMPUTE-SANITIZER", "Something new happened in a kernel", "at 0x1f0 in libcublasLt.so"]


def test_parse_of_a_clean_run_finds_nothing():
    assert sanitize.parse(CLEAN) == (0, [])


def test_the_commands_report_every_hazard_and_leave_library_kernels_out(monkeypatch):
    monkeypatch.setattr(sanitize, "sanitizer", lambda: "compute-sanitizer")
    race = sanitize.command("racecheck")
    assert race[:3] == ["compute-sanitizer", "--tool", "racecheck"]
    assert race[race.index("--racecheck-report") + 1] == "all"
    memcheck = sanitize.command("memcheck")
    assert memcheck[memcheck.index("--error-exitcode") + 1] == "99"
    assert memcheck[memcheck.index("--report-api-errors") + 1] == "no"
    assert "kns=cudnn" in memcheck, "cuDNN's own kernels are not ours to sanitize"
    assert "--track-unused-memory" not in sanitize.command("initcheck"), "it takes no value: 'no' ran as the program"


def test_a_sanitizer_without_kernel_filters_still_checks_everything(monkeypatch):
    monkeypatch.setattr(sanitize, "sanitizer", lambda: "compute-sanitizer")
    monkeypatch.setattr(sanitize, "_accepts", lambda cmd: "--kernel-name-exclude" not in cmd)
    cmd = sanitize.usable_command("memcheck")
    assert "--kernel-name-exclude" not in cmd and cmd[:3] == ["compute-sanitizer", "--tool", "memcheck"]


def test_findings_as_json_name_the_version_and_the_tool():
    v = Project(FIXTURES / "project").family("scale").version(8)
    found = [sanitize.Finding(v, "memcheck", "errors", 3, ["Invalid __global__ write"]),
             sanitize.Finding(v, "racecheck", "clean")]
    out = json.loads(json.dumps(sanitize.to_json(found, {"name": "H100"}, ("memcheck", "racecheck"), done=False)))
    assert out["complete"] is False and out["tools"] == ["memcheck", "racecheck"]
    assert [(f["family"], f["version"], f["tool"], f["status"], f["errors"]) for f in out["findings"]] == [
        ("scale", 8, "memcheck", "errors", 3), ("scale", 8, "racecheck", "clean", 0)]


def test_jobs_run_tool_by_tool_and_come_back_in_that_order(monkeypatch):
    """Every version's memcheck before any racecheck (a run cut short has the most telling tool
    everywhere); the sanitizer's verdict, not the job's, decides."""
    project = Project(FIXTURES / "project")
    versions = [project.family("scale").version(n) for n in (1, 7, 8)]
    started = []

    class FakeStore:
        def cases(self, family, sizes, precision, extra_sizes=(), seeds=None):
            return [f"/cases/{family.name}"]

    class FakeSession:  # what sanitize needs of a bench Session: the case files and the request
        store = FakeStore()

        def request(self, family, sizes, precision):
            return {"job": "rows", "family": family.name}

    def fake_job(req, timeout, prefix):  # the child's output as compute-sanitizer would leave it
        tool = prefix[prefix.index("--tool") + 1]
        number = req["providers"][0]["version"]
        started.append((tool, number))
        out = {(("memcheck", 8)): MEMCHECK_ERRORS, ("racecheck", 7): RACECHECK_HAZARDS,
               ("racecheck", 1): SANITIZER_BROKE}.get((tool, number), CLEAN)
        return {"status": "passed", "rows": [{"status": "passed"}], "_stdout": out}

    monkeypatch.setattr(sanitize, "run_job", fake_job)
    monkeypatch.setattr(sanitize, "sanitizer", lambda: "compute-sanitizer")
    monkeypatch.setattr(sanitize, "_accepts", lambda cmd: True)
    found = sanitize.sanitize(FakeSession(), versions, ("memcheck", "racecheck"), parallel=1)
    assert started == [("memcheck", 1), ("memcheck", 7), ("memcheck", 8),
                       ("racecheck", 1), ("racecheck", 7), ("racecheck", 8)]
    verdicts = {(f.tool, f.version.number): f.status for f in found}
    assert verdicts == {("memcheck", 1): "clean", ("memcheck", 7): "clean", ("memcheck", 8): "errors",
                        ("racecheck", 1): "failed", ("racecheck", 7): "errors", ("racecheck", 8): "clean"}
    broke = next(f for f in found if (f.tool, f.version.number) == ("racecheck", 1))
    assert broke.reason == ("compute-sanitizer: Internal Sanitizer Error: "
                            "The Sanitizer failed to handle a hardware exception.")


def test_an_existing_json_is_refused_before_any_work(tmp_path):
    out = tmp_path / "found.json"
    out.write_text("{}")
    res = CliRunner().invoke(cli, ["sanitize", "--json", str(out)])
    assert res.exit_code != 0
    assert "exists; pass --force" in res.output
    assert out.read_text() == "{}"


@pytest.mark.gpu
def test_the_planted_race_and_out_of_bounds_write_are_caught_and_the_correct_version_is_clean():
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on PATH")
    from workbench.bench import Options, Session
    project = Project(FIXTURES / "project")
    versions = [project.family("scale").version(n) for n in (1, 7, 8)]
    with Session(project, Options(seeds=1, time=False)) as session:
        found = sanitize.sanitize(session, versions, ("memcheck", "racecheck"), parallel=4, timeout=120)
    verdict = {(f.tool, f.version.number): f for f in found}
    assert verdict[("memcheck", 1)].status == "clean" and verdict[("racecheck", 1)].status == "clean"
    assert verdict[("racecheck", 7)].status == "errors", verdict[("racecheck", 7)]
    assert verdict[("memcheck", 8)].status == "errors", verdict[("memcheck", 8)]
    assert verdict[("memcheck", 8)].lines, "the sanitizer's first report is kept"


@pytest.mark.gpu
def test_sanitize_on_the_command_line_writes_its_json_and_fails_on_a_finding(tmp_path):
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on PATH")
    out = tmp_path / "found.json"
    res = CliRunner().invoke(cli, ["--root", str(FIXTURES / "project"), "sanitize", "scale", "8",
                                   "--tool", "memcheck", "--json", str(out)])
    found = json.loads(out.read_text())
    assert found["complete"] is True
    assert [(f["version"], f["tool"], f["status"]) for f in found["findings"]] == [(8, "memcheck", "errors")]
    assert res.exit_code == 1, res.output


def test_a_version_for_another_arch_is_skipped_with_its_reason_and_nothing_runs(monkeypatch):
    """sanitize on an A100 with attention_forward 13 (sm_90a code): no cases, no job, a skip that says why."""
    class Session:  # what sanitize asks of a session before any job
        def device(self):
            return {"device": {"compute_capability": "8.0"}}

        def __getattr__(self, name):
            raise AssertionError(f"sanitize used session.{name} for a version it cannot run")
    monkeypatch.setattr(sanitize, "usable_command", lambda tool: ["compute-sanitizer", "--tool", tool])
    monkeypatch.setattr(sanitize, "run_job", lambda *a, **k: pytest.fail("a job ran"))
    v = Project().family("attention_forward").version(13)
    findings = sanitize.sanitize(Session(), [v], tools=("memcheck", "racecheck"))
    assert [(f.tool, f.status) for f in findings] == [("memcheck", "skipped"), ("racecheck", "skipped")]
    assert all("needs sm_90a" in f.reason and "sm_80" in f.reason for f in findings)
