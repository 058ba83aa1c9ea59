"""`workbench diff FAMILY A B`: two versions side by side. CPU only, on real versions of the course
(gelu_forward 3 and 4: 4 adds bf16.cuh beside the gelu.cuh both include)."""

import difflib
import re

import pytest
from click.testing import CliRunner
from rich.console import Console

from conftest import ROOT
from workbench.cli import diff as diff_module
from workbench.cli import cli
from workbench.cli.diff import FileDiff, diff_lines, helpers

FAMILY = ROOT / "kernels" / "gelu_forward"
A_PATH, B_PATH = FAMILY / "3_packed128_unrolled.cu", FAMILY / "4_bf16_pack8.cu"


@pytest.fixture(autouse=True)
def console_80_columns(monkeypatch):
    """CliRunner's width, whatever COLUMNS the test run has: a line longer than 80 must still
    come out whole."""
    monkeypatch.setattr(diff_module, "console", Console(width=80, highlight=False))


def invoke(*args):
    return CliRunner().invoke(cli, ["diff", *args])


def only_in(lines, other):
    seen = set(other)
    return [line for line in lines if line.strip() and line not in seen and line == line.rstrip()]


def test_diff_tells_both_stories_then_the_diff_then_the_helpers():
    r = invoke("gelu_forward", "3", "4")
    assert r.exit_code == 0, r.output
    a, b = A_PATH.read_text().splitlines(), B_PATH.read_text().splitlines()
    out = r.output.splitlines()
    assert "Four float4 per thread, all loads issued before any store" in r.output  # A's title
    assert "bf16 storage: eight values per 16-byte access, GELU in fp32" in r.output  # B's
    assert "why faster" in r.output  # the story as `show` tells it
    added, removed = only_in(b, a), only_in(a, b)
    assert 'extern "C" __global__ void gelu_forward4(bf16* out, const bf16* inp, int N) {' in added
    assert 'extern "C" __global__ void gelu_forward3(float* out, const float* inp, int N) {' in removed
    for line in added:  # numbered on B's side only, then '+' and the line, whole
        assert any(re.fullmatch(r" *\d+ \+" + re.escape(line), o) for o in out), line
    for line in removed:
        assert any(re.fullmatch(r" *\d+ +-" + re.escape(line), o) for o in out), line
    assert any(re.fullmatch(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@", o) for o in out)
    assert re.search(r"same +kernels/common/gelu\.cuh", r.output)
    assert re.search(r"only in B +kernels/common/bf16\.cuh +\(gelu_forward 4\)", r.output)
    assert "Traceback" not in r.output


def test_long_lines_are_never_cut_at_the_terminal_width():
    r = invoke("gelu_forward", "3", "4")
    out = r.output.splitlines()
    assert max(len(o) for o in out if o.startswith("╭")) == 80  # the console really is 80 wide
    long_b = [line for line in only_in(B_PATH.read_text().splitlines(), A_PATH.read_text().splitlines())
              if len(line) > 80]
    assert any(line.startswith("changed = ") for line in long_b)  # the header's prose, one long line
    assert any("gelu_bf16(bf16 x)" in line for line in long_b)  # and code
    for line in long_b:
        assert any(o.endswith("+" + line) for o in out), line


def difflib_counts(a, b):
    lines = list(difflib.unified_diff(a, b, lineterm=""))[2:]
    return (sum(o.startswith("+") for o in lines), sum(o.startswith("-") for o in lines))


def test_stat_counts_are_difflibs():
    r = invoke("gelu_forward", "3", "4", "--stat")
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert first.startswith("kernels/gelu_forward/3_packed128_unrolled.cu -> kernels/gelu_forward/4_bf16_pack8.cu")
    added, removed = map(int, re.search(r"\+(\d+) -(\d+)$", first).groups())
    assert (added, removed) == difflib_counts(A_PATH.read_text().splitlines(), B_PATH.read_text().splitlines())
    assert (added, removed) != (0, 0)
    assert re.search(r"kernels/common/gelu\.cuh +same", r.output)
    assert re.search(r"kernels/common/bf16\.cuh +only in B \(gelu_forward 4\)", r.output)
    assert "@@" not in r.output and "why faster" not in r.output  # just the counts


def test_context_sets_the_hunks_as_difflib_does():
    a, b = A_PATH.read_text().splitlines(), B_PATH.read_text().splitlines()
    for n in (0, 1, 3):
        r = invoke("gelu_forward", "3", "4", "--context", str(n))
        ours = [o for o in r.output.splitlines() if o.startswith("@@")]
        assert ours == [o for o in difflib.unified_diff(a, b, lineterm="", n=n) if o.startswith("@@")]


@pytest.mark.parametrize("args, message", [
    (("nope", "1", "2"), "unknown family 'nope'"),
    (("gelu_forward", "3", "9"), "gelu_forward has no version 9 (versions: 1, 2, 3, 4)"),
    (("gelu_forward", "x", "3"), "gelu_forward has no version x (versions: 1, 2, 3, 4)"),
    (("gelu_forward", "3", "3"), "nothing to compare: version 3 with itself"),
    (("gelu_forward", "3", "03"), "nothing to compare: version 3 with itself"),
])
def test_errors_are_one_line_exit_2(args, message):
    r = invoke(*args)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert len(r.output.strip().splitlines()) == 1 and message in r.output
    assert "Traceback" not in r.output


def test_no_color_is_plain_even_on_a_terminal(monkeypatch):
    monkeypatch.setattr(diff_module, "console", Console(force_terminal=True, color_system="standard", width=80))
    assert "\x1b[" in invoke("gelu_forward", "3", "4").output
    r = invoke("gelu_forward", "3", "4", "--no-color")
    assert r.exit_code == 0 and "\x1b[" not in r.output and "+++ kernels/gelu_forward/4_bf16_pack8.cu" in r.output


def test_helpers_are_found_through_one_another_and_a_changed_one_is_diffed(tmp_path):
    fam, common = tmp_path / "kernels" / "fam", tmp_path / "kernels" / "common"
    fam.mkdir(parents=True)
    common.mkdir()
    (fam / "1_x.cu").write_text('#include <cfloat>\n#include "local.cuh"\n#include "missing.h"\n')
    (fam / "local.cuh").write_text('#include "shared.cuh"  // through local\n')
    (common / "shared.cuh").write_text("int a;\n")
    found = helpers(fam / "1_x.cu")
    assert list(found) == ["local.cuh", "shared.cuh"]
    assert found["local.cuh"].path == fam / "local.cuh" and found["local.cuh"].via is None
    assert found["shared.cuh"].path == common / "shared.cuh" and found["shared.cuh"].via == "local.cuh"

    other = tmp_path / "shared_b.cuh"
    other.write_text("int a;\nint b;\n")
    d = FileDiff.of(common / "shared.cuh", other)
    assert d.status == "changed" and d.counts() == (1, 0)
    text = [t.plain for t in diff_lines(d, "A", "B")]
    assert text[:3] == ["--- A", "+++ B", "@@ -1 +1,2 @@"] and text[-1] == "  2 +int b;"
    assert FileDiff.of(common / "shared.cuh", None).status == "only A"
    assert FileDiff.of(common / "shared.cuh", common / "shared.cuh").status == "same"
