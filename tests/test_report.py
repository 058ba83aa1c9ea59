"""Rendering from results recorded on the H100 (tests/fixtures/results), no GPU needed."""

import json

from rich.console import Console

from workbench import report

from conftest import FIXTURES

RESULTS = FIXTURES / "results"


def render(renderable) -> str:
    console = Console(record=True, width=200, color_system=None)
    console.print(renderable)
    return console.export_text()


def load(name):
    return json.loads((RESULTS / name).read_text())


def test_bench_table_has_a_row_per_version_with_its_best_configuration():
    payload = load("bench_layernorm_forward.json")
    fam = payload["families"][0]
    text = render(report.bench_table(fam))
    for v in fam["versions"]:
        assert v["title"] in text
        b = v["best"]
        assert report.fmt_us(b["median_us"]) in text
        assert f"{b['pct_ceiling']:.1f}%" in text
    assert "torch: F.layer_norm" in text
    assert f"{fam['versions'][-1]['speedup_vs_first']:.2f}x" in text


def test_titles_with_brackets_are_not_eaten_as_markup():
    fam = load("bench_layernorm_forward.json")["families"][0]
    assert "var = E[x^2] - E[x]^2" in render(report.bench_table(fam))


def test_faulty_versions_show_why():
    fam = load("bench_faulty.json")["families"][0]
    text = render(report.bench_table(fam))
    assert "crashed: an illegal memory access was encountered" in text
    assert "timed out after 20 s" in text
    assert "elements, max abs err nan" in text


def test_a_failure_lists_mismatches_in_the_ops_coordinates():
    fam = load("bench_faulty.json")["families"][0]
    tail = next(v for v in fam["versions"] if v["version"] == 4)
    text = render(report.failure_details(tail))
    assert "(n=" in text and "nan" in text


def test_run_report_shows_device_check_and_block_size_table():
    res = load("run_layernorm_forward_6.json")
    meta = {k: res[k] for k in ("device", "ceiling")}
    version = res["families"][0]["versions"][0]
    text = render(report.run_report(version, meta, res["families"][0].get("torch")))
    assert "NVIDIA H100" in text and "measured copy ceiling" in text
    assert "passed: every element" in text and "re-checked after timing" in text
    for bs in version["timings"]:
        assert f"\n│ {bs:>10} │" in text or f"│ {bs} " in text
    assert "best: block size" in text
    assert "faster than torch" in text


def test_json_is_written_atomically(tmp_path):
    path = tmp_path / "r.json"
    report.write_json(path, report.bench_payload({"device": {}}, [{"family": "x"}]))
    assert json.loads(path.read_text())["families"] == [{"family": "x"}]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_the_l2_flag_needs_a_working_set_that_could_fit_in_l2():
    l2 = 50 * 2**20
    assert report.l2_suspect(95.0, 50e6, l2)          # a 50 MB layernorm above 93%: suspect
    assert not report.l2_suspect(99.0, 3.5e9, l2)     # AdamW's 3.5 GB cannot hide in L2
    assert not report.l2_suspect(90.0, 50e6, l2)
