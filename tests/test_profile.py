"""`workbench profile` without a GPU: ncu's real CSV exports (tests/fixtures/ncu: layernorm_forward 4
on the H100, ncu 2025.3.1, `ncu --import lf4.ncu-rep --csv --page raw` and `--page details`) read
into a profile per kernel, the table and the JSON made of it, the ncu command, and the one-line
errors: every input checked before ncu or PyCUDA is looked for, ncu missing, counters refused."""

import csv
import io
import json
import os
import stat

import pytest
from click.testing import CliRunner
from rich.console import Console

from workbench import profile, report
from workbench.cli import cli
from workbench.family import Project

from conftest import FIXTURES, ROOT

RAW = (FIXTURES / "ncu" / "lf4_raw.csv").read_text()
DETAILS = (FIXTURES / "ncu" / "lf4_details.csv").read_text()


def rendered(thing, width=160) -> str:
    console = Console(width=width, record=True, highlight=False)
    console.print(thing)
    return console.export_text()


def edited_raw(rows_of) -> str:
    """The fixture's raw page with its rows changed by `rows_of(header, units, values) -> rows`."""
    header, units, values = list(csv.reader(io.StringIO(RAW)))
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows_of(header, units, values))
    return out.getvalue()


# -- reading ncu's pages -----------------------------------------------------------------------------
def test_the_real_report_reads_as_one_kernel_with_every_metric():
    [k] = profile.kernels_from(RAW, DETAILS)
    assert k.name == "layernorm_forward4" and k.grid == "(1024, 1, 1)" and k.block == "(256, 1, 1)"
    # the values ncu's own details page shows for the same kernel (lf4_details.csv)
    assert k.duration_us == pytest.approx(20.896)
    assert k.dram_pct == pytest.approx(40.89, abs=0.01)       # "DRAM Throughput"
    assert k.sm_pct == pytest.approx(24.98, abs=0.01)         # "Compute (SM) Throughput"
    assert k.occupancy_pct == pytest.approx(96.16, abs=0.01)  # "Achieved Occupancy"
    assert k.registers == 32                                  # "Registers Per Thread"
    assert k.l2_hit_pct == pytest.approx(52.66, abs=0.01)     # "L2 Hit Rate"
    assert k.sm_clock_ghz == pytest.approx(1.58, abs=0.01)    # "SM Frequency": base, under ncu


def test_the_top_stalls_are_ranked_and_shared_as_ncu_says():
    [k] = profile.kernels_from(RAW, DETAILS)
    assert [s.reason for s in k.stalls] == ["long_scoreboard", "lg_throttle", "not_selected"]
    assert k.stalls[0].cycles == pytest.approx(44.35, abs=0.01)
    # ncu's CPIStall rule: "44.4 cycles ... about 75.9% of the total average of 58.4 cycles"
    assert k.stalls[0].share == pytest.approx(75.9, abs=0.05)
    assert all(s.reason != "selected" for s in k.stalls)  # issuing is not a stall


def test_the_rules_are_read_with_their_type_and_estimated_speedup():
    [k] = profile.kernels_from(RAW, DETAILS)
    by_name = {(r.name, r.type): r for r in k.rules}
    assert len(k.rules) == 9
    high = by_name[("HighPipeUtilization", "OPT")]
    assert high.speedup == pytest.approx(85.57) and high.speedup_type == "local"
    assert high.section == "ComputeWorkloadAnalysis"  # the section the rule belongs to
    assert by_name[("SOLBottleneck", "OPT")].speedup is None  # no estimate given
    assert ("SOLFPRoofline", "INF") in by_name
    assert high.short() == "All compute pipelines are under-utilized."
    long_one = by_name[("IssueSlotUtilization", "OPT")].short(60)
    assert len(long_one) == 60 and long_one.endswith("…")


def test_numbers_and_units():
    assert profile.number("1,024") == 1024.0 and profile.number("20.896000") == pytest.approx(20.896)
    assert profile.number("") is None and profile.number("PolicySpread") == "PolicySpread"

    def in_ms(header, units, values):  # the same kernel's duration, as ncu prints a long one
        i = header.index(profile.DURATION)
        units[i], values[i] = "ms", "1.500000"
        return [header, units, values]
    [k] = profile.kernels_from(edited_raw(in_ms), DETAILS)
    assert k.duration_us == pytest.approx(1500.0)


def test_several_kernels_each_keep_their_own_rules_and_the_durations_add_up():
    def two(header, units, values):
        second = list(values)
        second[header.index("ID")], second[header.index("Kernel Name")] = "1", "normalize"
        second[header.index(profile.DURATION)] = "5.104000"
        return [header, units, values, second]
    ks = profile.kernels_from(edited_raw(two), DETAILS)
    assert [k.name for k in ks] == ["layernorm_forward4", "normalize"]
    assert len(ks[0].rules) == 9 and ks[1].rules == []  # the details page held rules for ID 0 only
    p = profile.VersionProfile("layernorm_forward", 2, "t", 256, kernels=ks)
    assert p.duration_us == pytest.approx(26.0)
    text = rendered(report.profile_table([p]))
    assert "1: layernorm_forward4" in text and "2: normalize" in text and "duration, all kernels" in text
    assert "26.0 µs" in text


def test_a_page_without_kernels_reads_as_none():
    assert profile.parse_raw("") == [] and profile.kernels_from("", "") == []
    assert profile.parse_raw('==PROF== No kernels were profiled.\n') == []


# -- the table and the JSON --------------------------------------------------------------------------
def test_the_table_shows_versions_side_by_side_with_their_rules():
    ks = profile.kernels_from(RAW, DETAILS)
    ok = profile.VersionProfile("layernorm_forward", 4, "One pass", 256, kernels=ks, device={"name": "NVIDIA H100 80GB HBM3"})
    broke = profile.VersionProfile("layernorm_forward", 6, "vec4", 128, status="crashed", reason="an illegal memory access")
    text = rendered(report.profile_report([ok, broke], "2025.3.1.0", {"B": 8, "T": 1024, "C": 768}))
    for cell in ("layernorm_forward 4", "layernorm_forward 6", "block 256", "block 128", "20.9 µs", "40.9%", "25.0%",
                 "96.2%", "52.7%", "long_scoreboard 44.4 (76%)", "lg_throttle 4.3 (7%)", "crashed: an illegal memory access"):
        assert cell in text, cell
    assert "locked to base (1.58 GHz)" in text and "ncu 2025.3.1.0 on NVIDIA H100 80GB HBM3 at B=8,T=1024,C=768" in text
    rules = report.profile_rules([ok])
    assert len(rules) == 7  # the OPT rules; INF notes stay in the JSON
    assert rules[0].startswith("layernorm_forward 4: OPT HighPipeUtilization (est. 85.6% local)")  # largest gain first
    assert all("INF" not in r for r in rules)
    assert any(r.startswith("layernorm_forward 4: OPT SOLBottleneck: This kernel grid is too small") for r in rules)


def test_a_library_kernel_name_is_shortened_in_the_table():
    name = "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(T1::Params)"
    assert report.kernel_name(name) == "void cutlass::Kernel2<cutlass_80_tensor…"
    assert report.kernel_name("layernorm_forward4") == "layernorm_forward4"


def test_the_json_holds_every_metric_stall_and_rule():
    ks = profile.kernels_from(RAW, DETAILS)
    p = profile.VersionProfile("layernorm_forward", 4, "One pass", 256, kernels=ks, launches=["layernorm_forward4<<<...>>>"],
                               resources={"layernorm_forward4": {"registers": 32}}, device={"name": "NVIDIA H100 80GB HBM3"})
    data = json.loads(json.dumps(profile.to_json([p], {"B": 8, "T": 1024, "C": 768}, "2025.3.1.0")))
    assert data["workbench_profile"] == 1 and data["ncu"] == "2025.3.1.0" and data["sm_clock_ghz"] == [1.58]
    assert data["device"]["name"] == "NVIDIA H100 80GB HBM3" and data["clock_control"] == "base"
    [v] = data["versions"]
    assert v["version"] == 4 and v["block_size"] == 256 and v["duration_us"] == pytest.approx(20.896)
    [k] = v["kernels"]
    assert k["registers"] == 32 and k["stalls"][0]["reason"] == "long_scoreboard"
    assert {r["type"] for r in k["rules"]} == {"OPT", "INF"} and len(k["rules"]) == 9


# -- the ncu command ---------------------------------------------------------------------------------------
def test_the_ncu_command_profiles_only_the_marked_launch_with_the_sections_asked_for():
    cmd = profile.ncu_command("/opt/ncu", "/tmp/x/profile.ncu-rep", "/tmp/x/ncu.log")
    assert cmd[0] == "/opt/ncu"
    text = " ".join(cmd)
    for part in ("--profile-from-start off", "--clock-control base", "--cache-control all", "--apply-rules yes",
                 "--export /tmp/x/profile.ncu-rep", "--log-file /tmp/x/ncu.log", "--replay-mode kernel"):
        assert part in text, part
    sections = [cmd[i + 1] for i, c in enumerate(cmd) if c == "--section"]
    assert sections == list(profile.SECTIONS)
    for needed in ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis", "WarpStateStats"):
        assert needed in sections
    assert profile.import_command("ncu", "r.ncu-rep", "raw") == ["ncu", "--import", "r.ncu-rep", "--csv", "--page", "raw"]


def test_the_block_size_is_the_one_asked_for_else_the_headers_first():
    v = Project(ROOT).family("layernorm_forward").version(4)
    assert profile.block_size_for(v, None) == v.block_sizes[0]
    assert profile.block_size_for(v, 256) == 256


# -- errors: one line each, inputs first -------------------------------------------------------------------
def invoke(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def one_error_line(r) -> str:
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in r.output, r.output
    return lines[0]


def test_every_bad_input_is_one_line_before_ncu_or_pycuda_is_looked_for(tmp_path):
    taken = tmp_path / "taken.json"
    taken.write_text("{}")
    no_ncu = {"PATH": str(tmp_path)}  # had an input got past the checks, ncu's absence would be the error
    for args, says in [
        (["nope"], "unknown family 'nope'"),
        (["layernorm_forward", "99"], "has no version 99"),
        (["layernorm_forward", "4", "--sizes", "B=4,Q=3"], "bad --sizes entry 'Q=3'"),
        (["layernorm_forward", "4", "--block-size", "7"], "does not take block size 7"),
        (["encoder_forward", "13", "--sizes", "C=7000"], "C <= 6144"),
        (["layernorm_forward", "4", "--sizes", "B=1000000000,T=1024,C=768"], "host memory"),
        (["layernorm_forward", "4", "--json", str(taken)], "pass --force"),
        (["layernorm_forward", "4", "--json", str(tmp_path / "nope" / "p.json")], "does not exist"),
    ]:
        r = invoke("profile", *args, env=no_ncu)
        line = one_error_line(r)
        assert r.exit_code == 2 and says in line and "Nsight" not in line and "PyCUDA" not in line, (args, r.output)


def test_ncu_missing_is_one_line_before_the_gpu_is_looked_for(tmp_path):
    r = invoke("profile", "layernorm_forward", "4", "--json", str(tmp_path / "p.json"), env={"PATH": str(tmp_path)})
    line = one_error_line(r)
    assert r.exit_code == 1 and line.startswith("error: ncu (Nsight Compute) is not on PATH: ")
    assert "PyCUDA" not in line and not (tmp_path / "p.json").exists()


def test_counters_not_permitted_is_one_line(tmp_path):
    # An ncu that answers as a driver keeping the counters from this user does: its message in
    # the log file, and the program it was to profile never run.
    fake = tmp_path / "ncu"
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--log-file" ]; do shift; done\n'
                    'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU '
                    'Performance Counters on the target device 0." > "$2"\nexit 1\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    v = Project(ROOT).family("layernorm_forward").version(4)
    with pytest.raises(profile.CountersNotPermitted, match="ERR_NVGPUCTRPERM") as e:
        profile.profile_version(ROOT, v, v.family.default_sizes, 256, str(fake), timeout=60)
    assert "\n" not in str(e.value) and "NVreg_RestrictProfilingToAdminUsers" in str(e.value)
    assert os.environ.get("PATH")  # the fake ncu was given by path, PATH untouched


def test_the_help_says_what_each_row_means():
    r = invoke("profile", "--help")
    assert r.exit_code == 0
    for row in ("duration", "DRAM throughput", "SM throughput", "achieved occupancy", "registers / thread",
                "L2 hit rate", "stall 1-3", "rules", "locked to base"):
        assert row in r.output, row
