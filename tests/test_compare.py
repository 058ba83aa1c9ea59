"""`workbench compare`: verdicts from recorded H100 results, altered on purpose (no GPU needed)."""

import copy
import json

import pytest
from rich.console import Console

from workbench import compare as cmp
from workbench.errors import WorkbenchError
from workbench.results import read_payload

from conftest import FIXTURES, ROOT

H100 = ROOT / "results" / "h100-bench.json"
FAMILY = "layernorm_forward"


@pytest.fixture(scope="module")
def h100():
    return read_payload(H100)


def render(renderable) -> str:
    console = Console(record=True, width=220, color_system=None)
    console.print(renderable)
    return console.export_text()


def timings_of(fam):
    """Every timing dict of a family: each version's per-block-size timings and best, the baselines'."""
    for v in fam["versions"]:
        yield from (v.get("timings") or {}).values()
        if v.get("best"):
            yield v["best"]
    for name in ("torch", "copy"):
        if fam.get(name) and fam[name].get("timing"):
            yield fam[name]["timing"]


def altered(payload, family=FAMILY, scale=1.0, band=None):
    """A deep copy with one family's times scaled by `scale`; `band=(lo, hi)` also sets each
    timing's p20/p80 to lo/hi times its (scaled) median."""
    out = copy.deepcopy(payload)
    fam = next(f for f in out["families"] if f["family"] == family)
    for t in timings_of(fam):
        for key in ("median_us", "p20_us", "p80_us"):
            t[key] *= scale
        if band:
            t["p20_us"], t["p80_us"] = band[0] * t["median_us"], band[1] * t["median_us"]
    return out


def by_family(comparison):
    return {f["label"]: f for f in comparison["families"]}


def verdicts(comparison, family):
    return {r["row"]: r["verdict"] for r in by_family(comparison)[family]["rows"]}


def test_a_run_against_itself_is_the_same_everywhere(h100):
    c = cmp.compare_runs(h100, h100)
    rows = cmp.all_rows(c)
    assert len(c["families"]) == len(h100["families"])
    assert rows and {r["verdict"] for r in rows} == {cmp.SAME}
    assert {"torch", "copy"} <= {r["row"] for r in rows}
    assert cmp.regressions(c) == []
    assert c["summary"]["geomean"] == pytest.approx(1.0)
    assert c["notes"] == []
    cmp.check_regressions(c)  # raises nothing


def test_one_family_slower_is_a_regression_there_only(h100):
    c = cmp.compare_runs(h100, altered(h100, scale=1.3))
    assert set(verdicts(c, FAMILY).values()) == {cmp.SLOWER}
    assert {"torch", "copy"} <= set(verdicts(c, FAMILY))
    for fam in c["families"]:
        if fam["family"] != FAMILY:
            assert {r["verdict"] for r in fam["rows"]} == {cmp.SAME}, fam["family"]
    bad = cmp.regressions(c)
    assert bad and {r["family"] for r in bad} == {FAMILY}
    assert all(r["kind"] == "version" and r["ratio"] == pytest.approx(1.3) for r in bad)
    assert len(bad) == len(next(f for f in h100["families"] if f["family"] == FAMILY)["versions"])
    with pytest.raises(cmp.Regressed, match=r"regression\(s\) beyond 5%: layernorm_forward 1 SLOWER 1.30x") as e:
        cmp.check_regressions(c)
    assert e.value.exit_code == 4
    # 30% slower is within a 50% threshold
    assert cmp.regressions(c, threshold=0.5) == []
    # the copy moved too: the note says the machine may be what changed
    assert any("copy of the same bytes moved" in n for n in c["notes"])


def test_one_family_faster_is_no_regression(h100):
    c = cmp.compare_runs(h100, altered(h100, scale=1 / 1.3))
    assert set(verdicts(c, FAMILY).values()) == {cmp.FASTER}
    assert cmp.regressions(c) == []
    assert c["summary"]["geomean"] < 1


def test_overlapping_bands_are_noisy_not_a_regression(h100):
    old = altered(h100, band=(0.6, 1.6))
    new = altered(h100, scale=1.3, band=(0.6, 1.6))
    c = cmp.compare_runs(old, new)
    assert set(verdicts(c, FAMILY).values()) == {cmp.NOISY}
    assert cmp.regressions(c) == []


def test_a_version_failing_in_new_is_a_regression(h100):
    new = copy.deepcopy(h100)
    fam = next(f for f in new["families"] if f["family"] == FAMILY)
    v = next(v for v in fam["versions"] if v["version"] == 6)
    for key in ("timings", "best", "best_block_size"):
        v.pop(key)
    v.update(status="crashed", reason="an illegal memory access was encountered\nmore lines")
    c = cmp.compare_runs(h100, new)
    row = next(r for r in by_family(c)[FAMILY]["rows"] if r["row"] == "6")
    assert row["verdict"] == cmp.FAILED and row["note"] == "crashed: an illegal memory access was encountered"
    assert cmp.regressions(c) == [row]
    assert "layernorm_forward 6 FAILED (crashed)" in cmp.describe(row)
    back = cmp.compare_runs(new, h100)
    assert verdicts(back, FAMILY)["6"] == cmp.FIXED and cmp.regressions(back) == []


def test_a_baseline_that_fails_is_shown_but_never_gates(h100):
    new = copy.deepcopy(h100)
    fam = next(f for f in new["families"] if f["family"] == FAMILY)
    fam["torch"] = {"status": "failed", "reason": "torch gave NaN"}
    c = cmp.compare_runs(h100, new)
    assert verdicts(c, FAMILY)["torch"] == cmp.FAILED
    assert cmp.regressions(c) == []


def test_rows_in_one_run_only_are_added_or_removed(h100):
    new = copy.deepcopy(h100)
    fam = next(f for f in new["families"] if f["family"] == FAMILY)
    fam["versions"] = [v for v in fam["versions"] if v["version"] != 2]
    new["families"] = [f for f in new["families"] if f["family"] != "adamw"]
    c = cmp.compare_runs(h100, new)
    assert verdicts(c, FAMILY)["2"] == cmp.REMOVED
    assert set(verdicts(c, "adamw").values()) == {cmp.REMOVED}
    back = cmp.compare_runs(new, h100)
    assert verdicts(back, FAMILY)["2"] == cmp.ADDED
    assert "only in NEW" in render(cmp.comparison_table(back))


def test_a_changed_best_block_size_is_noted(h100):
    new = copy.deepcopy(h100)
    v = next(f for f in new["families"] if f["family"] == FAMILY)["versions"][0]
    v["best_block_size"] = 1024 if v["best_block_size"] != 1024 else 512
    c = cmp.compare_runs(h100, new)
    row = by_family(c)[FAMILY]["rows"][0]
    assert row["verdict"] == cmp.SAME and row["note"].startswith("block size ")


def test_a_different_device_is_a_note_not_an_error(h100):
    new = copy.deepcopy(h100)
    new["device"]["name"] = "NVIDIA A100-SXM4-80GB"
    new["device"]["compute_capability"] = "8.0"
    c = cmp.compare_runs(h100, new)
    assert any("different devices" in n and "A100" in n for n in c["notes"])
    assert {r["verdict"] for r in cmp.all_rows(c)} == {cmp.SAME}
    assert "note: different devices" in render(cmp.comparison_report(c))


def test_different_sizes_make_a_family_incomparable(h100):
    new = altered(h100, scale=2.0)
    next(f for f in new["families"] if f["family"] == FAMILY)["sizes"]["B"] = 4
    c = cmp.compare_runs(h100, new)
    fam = by_family(c)[FAMILY]
    assert not fam["comparable"] and set(verdicts(c, FAMILY).values()) == {cmp.INCOMPARABLE}
    assert any("sizes differ" in n and "B=4" in n for n in c["notes"])
    assert cmp.regressions(c) == []


def test_precisions_of_a_family_are_separate_families(h100):
    new = copy.deepcopy(h100)
    bf16 = copy.deepcopy(next(f for f in new["families"] if f["family"] == FAMILY))
    bf16["precision"] = "bf16"
    new["families"].append(bf16)
    c = cmp.compare_runs(h100, new)
    assert set(verdicts(c, FAMILY).values()) == {cmp.SAME}
    assert set(verdicts(c, "layernorm_forward (bf16)").values()) == {cmp.ADDED}


def test_the_verdict_rule():
    def s(med, p20=None, p80=None, status="passed"):
        return {"status": status, "median_us": med, "p20_us": p20 or med, "p80_us": p80 or med, "block_size": 256}
    assert cmp.classify(s(100, 99, 101), s(102, 101, 103)) == (cmp.SAME, pytest.approx(1.02))
    assert cmp.classify(s(100, 99, 101), s(110, 109, 111))[0] == cmp.SLOWER
    assert cmp.classify(s(100, 99, 101), s(90, 89, 91))[0] == cmp.FASTER
    assert cmp.classify(s(100, 90, 120), s(110, 95, 125))[0] == cmp.NOISY
    # a tiny kernel: 0.06 µs apart is a few timer ticks, SAME even at 3%+
    assert cmp.classify(s(1.50), s(1.56))[0] == cmp.SAME
    assert cmp.classify(s(100, 99, 101), s(110, 109, 111), same=0.15)[0] == cmp.SAME
    assert cmp.classify(s(100), s(None, status="failed"))[0] == cmp.FAILED
    assert cmp.classify(s(None, status="refused"), s(None, status="refused"))[0] == cmp.UNTIMED


def test_old_run_and_bench_files_keep_loading_and_compare():
    bench = FIXTURES / "results" / "bench_layernorm_forward.json"
    run = FIXTURES / "results" / "run_layernorm_forward_6.json"
    c = cmp.compare_files(bench, run)  # a run file records its sizes on the version only
    assert verdicts(c, FAMILY)["6"] in (cmp.SAME, cmp.FASTER, cmp.SLOWER, cmp.NOISY)
    assert verdicts(c, FAMILY)["1"] == cmp.REMOVED
    faulty = cmp.compare_files(FIXTURES / "results" / "bench_faulty.json", FIXTURES / "results" / "bench_faulty.json")
    assert verdicts(faulty, "scale") == {"1": cmp.SAME, **{str(n): cmp.UNTIMED for n in range(2, 7)}}
    json.dumps(c)  # plain data: the CLI can write it as JSON


def test_the_table_and_summary_render(h100):
    c = cmp.compare_runs(h100, altered(h100, scale=1.3), old_name="before.json", new_name="after.json")
    text = render(cmp.comparison_report(c))
    assert "after.json against before.json" in text
    assert "layernorm_forward" in text and "SLOWER" in text and "1.30x" in text
    assert "SAME" in text and "±" in text
    n = len(cmp.regressions(c))
    assert f"{n} regression(s) beyond 5%" in text
    summary = render(cmp.summary_line(c))
    counts = c["summary"]["counts"]
    assert f"{counts['SLOWER']} SLOWER" in summary and f"{counts['SAME']} SAME" in summary
    assert "geometric mean new/old" in summary and "slower" in summary


@pytest.mark.parametrize("content, message", [
    ('{"families": []}', "not a workbench results file"),
    ("[1, 2]", "not a workbench results file"),
    ('{"workbench": 1, "families": {"a": 1}}', '"families" list'),
    ('{"workbench": "x", "families": []}', "unknown results format"),
    ("not json at all", "not JSON"),
])
def test_files_that_are_not_results_are_refused(tmp_path, content, message):
    path = tmp_path / "other.json"
    path.write_text(content)
    with pytest.raises(WorkbenchError, match=message) as e:
        read_payload(path)
    assert "\n" not in str(e.value) and str(path) in str(e.value)


def test_a_gzipped_results_file_reads_as_the_plain_one_and_a_bad_one_in_one_line(tmp_path, h100):
    import gzip
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(H100.read_bytes()))
    assert read_payload(path) == h100
    bad = tmp_path / "bad.json.gz"
    bad.write_text("not gzip")
    with pytest.raises(WorkbenchError, match="cannot read it") as e:
        read_payload(bad)
    assert "\n" not in str(e.value) and str(bad) in str(e.value)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(H100.read_bytes())[:1000])
    with pytest.raises(WorkbenchError, match="cannot read it"):
        read_payload(cut)


def test_missing_files_and_folders_are_refused(tmp_path, h100):
    with pytest.raises(WorkbenchError, match="no such file"):
        read_payload(tmp_path / "missing.json")
    with pytest.raises(WorkbenchError, match="is a folder"):
        read_payload(tmp_path)
    with pytest.raises(WorkbenchError, match="NEW: not a workbench results file"):
        cmp.compare_runs(h100, {"some": "dict"})


def test_comparing_a_file_with_itself_says_so_in_one_note(tmp_path):
    from click.testing import CliRunner
    from workbench.cli import cli
    r = CliRunner().invoke(cli, ["compare", str(H100), str(H100)])
    notes = [line for line in r.output.splitlines() if "same file" in line]
    assert r.exit_code == 0 and len(notes) == 1 and notes[0].startswith("note: OLD and NEW are the same file"), r.output
    copied = tmp_path / "copy.json"
    copied.write_text(H100.read_text())
    assert not any("same file" in n for n in cmp.compare_files(H100, copied)["notes"])  # equal, not the same
    assert "same file" in cmp.compare_files(copied, tmp_path / ".." / tmp_path.name / "copy.json")["notes"][0]
