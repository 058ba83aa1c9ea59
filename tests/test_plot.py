"""`workbench plot` and sweeps: PNGs from recorded H100 results (skipped without matplotlib), and
the --sweep syntax (no matplotlib needed)."""

import copy
import json
import sys

import pytest

from workbench import plot
from workbench.results import read_payload as load_results
from workbench.errors import WorkbenchError

from conftest import FIXTURES, ROOT

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def mpl():
    return pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def h100():
    return load_results(ROOT / "results" / "h100-bench.json")


def assert_png(path, min_bytes=10_000):
    data = path.read_bytes()
    assert data[:8] == PNG, path
    assert len(data) > min_bytes, (path, len(data))


def synthetic_sweep(values, failed=()):
    points = []
    for i, v in enumerate(values):
        if v in failed:
            points.append({"sizes": {"N": 8, "C": v}, "value": v, "status": "failed"})
            continue
        us = 2.0 + 0.01 * v
        points.append({"sizes": {"N": 8, "C": v}, "value": v, "median_us": us, "p20_us": 0.97 * us,
                       "p80_us": 1.05 * us, "gbps": 900.0 + i, "pct_ceiling": 30.0 + 5 * i,
                       "copy_median_us": 0.8 * us})
    return {"family": "layernorm_forward", "version": 6, "axis": "C", "device": {"name": "NVIDIA H100 80GB HBM3"},
            "ceiling": {"gbps": 3009.8}, "points": points}


def test_plot_results_writes_a_png_per_family_and_the_roofline(mpl, h100, tmp_path):
    out = tmp_path / "plots" / "h100"   # created, parents too
    paths = plot.plot_results(h100, out)
    names = sorted(p.name for p in paths)
    assert len(paths) == len(h100["families"]) + 1 == 27
    assert names == sorted([f"{f['family']}.png" for f in h100["families"]] + ["roofline.png"])
    for path in paths:
        assert path.parent == out
        assert_png(path)
    assert sorted(p.name for p in out.iterdir()) == names, "no temporary files left behind"


def test_failed_versions_a_run_file_and_a_bf16_family_plot(mpl, tmp_path):
    faulty = load_results(FIXTURES / "results" / "bench_faulty.json")
    bars = plot.version_bars(faulty["families"][0])
    assert [b["ok"] for b in bars] == [True, False, False, False, False, False]
    assert bars[1]["label"] == "2\ncrashed" and bars[2]["label"] == "3\ntimed out"
    assert [p.name for p in plot.plot_results(faulty, tmp_path)] == ["scale.png", "roofline.png"]
    run = load_results(FIXTURES / "results" / "run_layernorm_forward_6.json")  # no family-level sizes
    bf16 = copy.deepcopy(run["families"][0])
    bf16["precision"] = "bf16"
    run["families"].append(bf16)
    paths = plot.plot_results(run, tmp_path / "run")
    assert [p.name for p in paths] == ["layernorm_forward.png", "layernorm_forward-bf16.png", "roofline.png"]
    for path in paths:
        assert_png(path)


def test_the_roofline_uses_measured_peaks_when_present(mpl, h100, tmp_path):
    with_peaks = dict(h100, peaks={"fp32": 51.0, "tf32": 378.0, "bf16": 740.0})
    assert_png(plot.plot_roofline(with_peaks, tmp_path / "roofline.png"))
    points = plot.roofline_points(h100)
    flops = {f["family"] for f in h100["families"] if f["flops"]}
    assert {p["family"] for p in points} == flops
    sgemm = next(p for p in points if p["family"] == "sgemm")
    fam = next(f for f in h100["families"] if f["family"] == "sgemm")
    assert sgemm["intensity"] == pytest.approx(fam["flops"] / fam["bytes"])
    shares = plot.copy_shares(h100)
    assert [s["pct"] for s in shares] == sorted(s["pct"] for s in shares)
    assert {s["family"] for s in shares} == {f["family"] for f in h100["families"] if not f["flops"]}
    assert all(50 < s["pct"] < 120 for s in shares)


def test_plot_sweep_writes_a_png(mpl, tmp_path):
    axis, values = plot.parse_sweep("C=256..8192:x1.5")
    path = plot.plot_sweep(synthetic_sweep(values, failed={values[2]}), tmp_path / "sweep.png")
    assert_png(path)
    with pytest.raises(WorkbenchError, match="no timed point"):
        plot.plot_sweep(synthetic_sweep([256], failed={256}), tmp_path / "empty.png")


def test_a_sweep_point_from_a_run_result():
    run = json.loads((FIXTURES / "results" / "run_layernorm_forward_6.json").read_text())
    fam = run["families"][0]
    point = plot.sweep_point(fam["versions"][0], "C", copy={"status": "passed", "timing": {"median_us": 15.0}})
    best = fam["versions"][0]["best"]
    assert point["value"] == 768 and point["sizes"]["B"] == 8
    assert point["median_us"] == best["median_us"] and point["pct_ceiling"] == best["pct_ceiling"]
    assert point["copy_median_us"] == 15.0
    assert "median_us" not in plot.sweep_point({"status": "failed", "sizes": {"C": 7}}, "C")


def test_labels_that_would_overprint_are_stacked():
    ys = plot.stack_labels([(0.0, 1.0, 0.5), (0.1, 1.0, 0.5), (2.0, 1.0, 0.5), (0.2, 0.98, 0.5)], height=0.05)
    assert ys[2] == 1.0, "a label far away stays put"
    close = [ys[0], ys[1], ys[3]]
    assert len(set(close)) == 3 and all(abs(a - b) >= 0.05 - 1e-12 for a in close for b in close if a != b)


def test_without_matplotlib_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(WorkbenchError, match=r"^matplotlib is not installed: pip install matplotlib$"):
        plot.plot_sweep(synthetic_sweep([256, 512]), tmp_path / "x.png")


@pytest.mark.parametrize("text, axis, values", [
    ("C=256..8192", "C", [256, 512, 1024, 2048, 4096, 8192]),
    ("C = 100..1000", "C", [100, 200, 400, 800, 1000]),
    ("T=64..64", "T", [64]),
    ("N=1..10:x1.3", "N", [1, 2, 3, 4, 5, 6, 8, 10]),
    ("C=100,300,1000", "C", [100, 300, 1000]),
    ("C=1000, 100,300,100", "C", [100, 300, 1000]),
    ("OC=768", "OC", [768]),
])
def test_parse_sweep(text, axis, values):
    assert plot.parse_sweep(text) == (axis, values)


def test_parse_sweep_with_a_factor_is_geometric_and_ends_at_the_bound():
    axis, values = plot.parse_sweep("C=256..8192:x1.5")
    assert axis == "C" and values[0] == 256 and values[-1] == 8192
    assert values == sorted(set(values)) and all(isinstance(v, int) for v in values)
    assert all(1.3 < b / a < 1.7 for a, b in zip(values[:-2], values[1:-1]))


@pytest.mark.parametrize("text, why", [
    ("C256..8192", "expected NAME=VALUES"),
    ("=256..8192", "the size name is missing"),
    ("2C=1..4", "is not a size name"),
    ("C=0..8", "sizes must be positive"),
    ("C=-4,8", "sizes must be positive"),
    ("C=8192..256", "runs backwards"),
    ("C=1..8:x1", "factor must be above 1"),
    ("C=1..8:x0.5", "factor must be above 1"),
    ("C=a..b", "cannot read"),
    ("C=", "cannot read"),
    ("C=1.5,2", "cannot read"),
])
def test_parse_sweep_refuses_in_one_line(text, why):
    with pytest.raises(WorkbenchError, match=why) as e:
        plot.parse_sweep(text)
    assert "\n" not in str(e.value) and "--sweep" in str(e.value)


def test_sweep_ticks_skip_values_too_close_to_label():
    assert plot.spaced_ticks([65536, 262144, 1000003, 1048576, 4194304, 16777216]) == [
        65536, 262144, 1000003, 4194304, 16777216]
    assert plot.spaced_ticks([8, 4]) == [4, 8]
    assert len(plot.spaced_ticks(list(range(1, 1000)))) <= 13


def invoke_plot(*args):
    from click.testing import CliRunner
    from workbench.cli import cli
    return CliRunner().invoke(cli, ["plot", *map(str, args)])


def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_drawing(tmp_path):
    results = FIXTURES / "results" / "bench_layernorm_forward.json"
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for out in ("/proc/nope", blocker / "plots", blocker):
        r = invoke_plot(results, "--out", out)
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith(f"error: --out {out}"), r.output
        assert "Traceback" not in r.output and "matplotlib" not in r.output
    assert blocker.read_text() == ""


def test_without_out_the_plots_go_beside_the_results_file_never_into_the_repository(tmp_path, monkeypatch):
    import shutil
    import subprocess
    where, cwd = tmp_path / "runs", tmp_path / "cwd"
    where.mkdir()
    cwd.mkdir()
    results = where / "r.json"
    shutil.copy(FIXTURES / "results" / "bench_layernorm_forward.json", results)
    monkeypatch.chdir(cwd)
    r = invoke_plot(results)  # without matplotlib it stops at drawing, after choosing the folder
    assert r.exit_code == 0 or "matplotlib is not installed" in r.output, r.output
    assert (where / "r-plots").is_dir() and not any(cwd.iterdir())
    assert "r-plots/" in invoke_plot("--help").output  # documented
    import gzip  # a gzipped results file (the repository's older runs): the same folder name
    (where / "s.json.gz").write_bytes(gzip.compress(results.read_bytes()))
    r = invoke_plot(where / "s.json.gz")
    assert r.exit_code == 0 or "matplotlib is not installed" in r.output, r.output
    assert (where / "s-plots").is_dir()
    if shutil.which("git"):  # the default for a results file inside the repository: ignored by git
        ignored = subprocess.run(["git", "check-ignore", "-q", "results/h100-bench-plots/roofline.png"], cwd=ROOT,
                                 timeout=60)
        assert ignored.returncode == 0, "the default plots folder is not in .gitignore"
