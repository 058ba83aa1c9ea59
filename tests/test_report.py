"""Rendering from results recorded on the H100 (tests/fixtures/results), no GPU needed."""

import json

from rich.console import Console

from workbench import report
from workbench.results import BenchRun, load as load_results, write_json

from conftest import FIXTURES

RESULTS = FIXTURES / "results"


def render(renderable) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(renderable)
    return console.export_text()


def load(name) -> BenchRun:
    return load_results(RESULTS / name)


def test_bench_table_has_a_row_per_version_with_its_best_configuration():
    fam = load("bench_layernorm_forward.json").families[0]
    text = render(report.bench_table(fam))
    for v in fam.versions:
        assert v.title in text
        assert report.fmt_us(v.best.median_us) in text
        assert f"{v.best.pct_ceiling:.1f}%" in text
    assert "torch: F.layer_norm" in text
    assert f"{fam.speedup_vs_first(fam.versions[-1]):.2f}x" in text


def test_titles_with_brackets_are_not_eaten_as_markup():
    fam = load("bench_layernorm_forward.json").families[0]
    assert "var = E[x^2] - E[x]^2" in render(report.bench_table(fam))


def test_faulty_versions_show_why():
    fam = load("bench_faulty.json").families[0]
    text = render(report.bench_table(fam))
    assert "crashed: an illegal memory access was encountered" in text
    assert "timed out after 20 s" in text
    assert "elements, max abs err nan" in text


def test_a_failure_lists_mismatches_in_the_ops_coordinates():
    tail = load("bench_faulty.json").families[0].version(4)
    text = render(report.failure_details(tail))
    assert "(n=" in text and "nan" in text


def test_run_report_shows_device_check_and_block_size_table():
    run = load("run_layernorm_forward_6.json")
    fam = run.families[0]
    version = fam.versions[0]
    text = render(report.run_report(version, run.meta, fam.torch))
    assert "NVIDIA H100" in text and "measured copy ceiling" in text
    assert "passed: every element" in text and "re-checked after timing" in text
    for bs in version.timings:
        assert f"│ {bs:>10} │" in text or f"│ {bs} " in text
    assert "best: block size" in text
    assert "faster than torch" in text


def test_json_is_written_atomically(tmp_path):
    path = tmp_path / "r.json"
    write_json(path, {"workbench": 1, "families": [{"family": "x"}]})
    assert json.loads(path.read_text())["families"] == [{"family": "x"}]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_l2_flag_needs_a_working_set_that_could_fit_in_l2():
    l2 = 50 * 2**20
    assert report.l2_suspect(95.0, 50e6, l2)          # a 50 MB layernorm above 93%: suspect
    assert not report.l2_suspect(99.0, 3.5e9, l2)     # AdamW's 3.5 GB cannot hide in L2
    assert not report.l2_suspect(90.0, 50e6, l2)


def test_old_results_files_load_and_write_back_the_same_figures():
    """results/h100-bench.json predates the typed results: loading and writing it keeps every
    version's status, best block size and figures, and the baselines."""
    from conftest import ROOT
    old = json.loads((ROOT / "results" / "h100-bench.json").read_text())
    again = load_results(ROOT / "results" / "h100-bench.json").to_json()
    assert [f["family"] for f in again["families"]] == [f["family"] for f in old["families"]]
    for before, after in zip(old["families"], again["families"]):
        assert after["best_version"] == before["best_version"]
        for k in ("torch", "copy"):
            if before.get(k) and before[k].get("timing"):
                assert after[k]["timing"]["median_us"] == before[k]["timing"]["median_us"]
        for v0, v1 in zip(before["versions"], after["versions"]):
            assert v1["status"] == v0["status"] and v1.get("best_block_size") == v0.get("best_block_size")
            assert v1.get("best") == v0.get("best")
            assert set(v1.get("timings", {})) == set(v0.get("timings", {}))


def test_block_sizes_are_ints_or_none_in_memory():
    run = load_results(RESULTS / "run_layernorm_forward_6.json")
    row = run.families[0].versions[0]
    assert all(isinstance(bs, int) for bs in row.timings) and isinstance(row.best_block_size, int)
    assert all(isinstance(b, int) for b in row.check.block_sizes)


def test_the_time_breakdown_splits_rows_time_into_their_phases():
    text = report.time_breakdown({"compiling": 20.0, "versions": 100.0, "total": 130.0},
                                 {"versions": {"setup": 10.0, "check": 40.0, "time": 30.0, "re-check": 5.0}})
    assert text.startswith("took 130 s")
    assert "compiling 20 s" in text
    assert "versions 100 s [setup 10, check 40, time 30, re-check 5, other 15]" in text
    assert text.endswith("not accounted 10 s)")  # 130 - 20 - 100: the remainder is named too


def test_a_breakdown_that_adds_up_has_no_remainder():
    text = report.time_breakdown({"compiling": 20.0, "versions": 110.0, "total": 130.0})
    assert "not accounted" not in text


def test_row_phases_and_run_phases_survive_a_round_trip(tmp_path):
    from workbench.results import Row
    run = load("bench_layernorm_forward.json")
    row = run.families[0].versions[0]
    row.phases = {"setup": 0.5, "check": 1.25, "time": 2.0}
    run.phases = {"versions": {"check": 1.25}}
    path = tmp_path / "r.json"
    write_json(path, run.to_json())
    again = load_results(path)
    assert again.families[0].versions[0].phases == {"setup": 0.5, "check": 1.25, "time": 2.0}
    assert again.phases == {"versions": {"check": 1.25}}
    assert "phases" not in Row.from_json({"status": "passed"}).extra


def test_a_failing_torch_baseline_says_which_output_and_how_far():
    """PyTorch's result can miss a family's tolerance (two bf16 roundings where the versions round
    once): its line says where, as a version's does, not only "failed"."""
    import dataclasses
    wrong = load("bench_faulty.json").families[0].version(4)
    torch = dataclasses.replace(wrong, kind="torch", version=None, expression="ref.torch_op(x)")
    line = render(report.torch_line(torch))
    assert line.startswith("torch: ") and "elements, max abs err" in line
    assert report.reason_line(wrong) in line


def test_a_run_file_rewritten_family_by_family_reads_as_save_writes_it(tmp_path):
    """RunFile (a bench's --json after each family) turns each family into text once; the file
    is byte for byte what save() writes, at every step, and a family put again is written anew."""
    from workbench.results import BenchRun, FamilyResult, Row, RunFile, load, save
    run = BenchRun(device={"name": "GPU"}, ceiling={"gbps": 3000.0}, seconds={"total": 1.0})
    out = RunFile(tmp_path / "run.json")
    for i in range(3):
        fam = FamilyResult(f"f{i}", "t", {"N": i}, 8, None, "fp32")
        fam.versions.append(Row("version", f"f{i}", 1, "v", status="passed"))
        run.put(fam)
        run.seconds = {"total": float(i)}
        out.save(run)
        save(tmp_path / "whole.json", run)
        assert (tmp_path / "run.json").read_text() == (tmp_path / "whole.json").read_text()
    again = FamilyResult("f1", "t2", {"N": 9}, 8, None, "fp32")
    run.put(again)
    out.save(run)
    assert [(f.family, f.title) for f in load(tmp_path / "run.json").families] == [("f0", "t"), ("f2", "t"), ("f1", "t2")]
    empty = RunFile(tmp_path / "empty.json")
    empty.save(BenchRun(device={}, ceiling={}))
    assert load(tmp_path / "empty.json").families == []
