"""Plots of results: a PNG per family, a roofline of every family, and a size sweep.

`workbench plot RESULTS.json [--out DIR]` writes `<family>.png` for each family of a results
file (`<family>-<precision>.png` for a precision other than fp32) and `roofline.png`;
`workbench run F V --sweep C=256..8192` times one version over a range of one size and plots it
with `plot_sweep`.

* A family's plot: each version's best median time as a bar with its p20-p80 band as the error
  bar (a log axis when the times span more than 20x), the PyTorch equivalent and the copy of the
  same bytes as horizontal lines; below, the share of the measured copy ceiling (memory-bound
  families, those without "flops") or TFLOP/s (compute-bound ones). A version that did not pass
  has no bar: its status stands in its label.
* The roofline: the compute-bound families' best versions at their arithmetic intensity
  (FLOPs / bytes) against the TFLOP/s they reach, under the bandwidth roof (the measured copy
  ceiling) and the compute roofs when the file measured them ("peaks"); the memory-bound
  families beside it as a bar chart of their best version's share of a copy of the same bytes.

matplotlib is optional: it is imported when a plot is drawn, and drawn through the Agg canvas
directly (no pyplot, no global backend). Each PNG is written to a temporary name in its folder,
then renamed: a crash never leaves half an image. The functions before `# -- drawing` are pure
functions of the results' dicts.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from .compare import best_timing, family_key
from .compare import family_label as _label
from .errors import UsageError, WorkbenchError
from .results import check_payload
from .report import fmt_us

LOG_SPREAD = 20.0      # a time axis goes logarithmic when its values span more than this factor
DPI = 110
# Measured compute roofs worth drawing for a family at each precision (fp32 families may use TF32).
PEAKS_FOR = {"fp32": ("fp32", "tf32"), "bf16": ("bf16",)}
SWEEP = re.compile(r"^\s*([^=\s]*)\s*=\s*(.*?)\s*$")
RANGE = re.compile(r"^(-?\d+)\s*\.\.\s*(-?\d+)(?:\s*:\s*x\s*([0-9]*\.?[0-9]+))?$")


# -- sweeps -----------------------------------------------------------------------------------------
def _sweep_error(text: str, why: str) -> UsageError:
    return UsageError(f"bad --sweep {text!r}: {why} (e.g. C=256..8192, C=256..8192:x1.5 or C=100,300,1000)")


def geometric_steps(lo: int, hi: int, factor: float = 2.0) -> list[int]:
    """lo, lo*factor, lo*factor^2... rounded to integers, without repeats, ending exactly at hi."""
    values: list[int] = []
    k = 0
    while True:
        x = lo * factor ** k
        if x > hi * (1 + 1e-9):
            break
        v = min(hi, int(math.floor(x + 0.5)))
        if not values or v != values[-1]:
            values.append(v)
        k += 1
    if values[-1] != hi:
        values.append(hi)
    return values


def parse_sweep(text: str) -> tuple[str, list[int]]:
    """`C=256..8192` (powers of two from 256), `C=256..8192:x1.5` (a geometric factor, ending at
    8192), `C=100,300,1000` (those values): (axis, ascending positive values). Checking the axis
    against the family's sizes is the caller's job."""
    m = SWEEP.match(text or "")
    if not m or "=" not in text:
        raise _sweep_error(text, "expected NAME=VALUES")
    axis, spec = m.group(1), m.group(2)
    if not axis.isidentifier():
        raise _sweep_error(text, f"{axis!r} is not a size name" if axis else "the size name is missing")
    r = RANGE.match(spec)
    if r:
        lo, hi = int(r.group(1)), int(r.group(2))
        factor = float(r.group(3)) if r.group(3) else 2.0
        if lo < 1 or hi < 1:
            raise _sweep_error(text, "sizes must be positive")
        if lo > hi:
            raise _sweep_error(text, f"the range runs backwards ({lo} > {hi})")
        if factor <= 1:
            raise _sweep_error(text, f"the factor must be above 1, got x{r.group(3)}")
        return axis, geometric_steps(lo, hi, factor)
    parts = [p.strip() for p in spec.split(",")]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise _sweep_error(text, f"cannot read {spec!r} as LO..HI[:xFACTOR] or a list of integers") from None
    if any(v < 1 for v in values):
        raise _sweep_error(text, "sizes must be positive")
    return axis, sorted(set(values))


def sweep_point(result: dict, axis: str, copy: dict | None = None) -> dict:
    """A point of a sweep from one size's version result (as `run` records it) and, optionally,
    its copy baseline (dicts as the JSON holds them, or results.Row records): the shape
    `plot_sweep` reads."""
    result = result.to_json() if hasattr(result, "to_json") else result
    copy = copy.to_json() if hasattr(copy, "to_json") else copy
    sizes = dict(result.get("sizes") or {})
    point: dict[str, Any] = {"sizes": sizes, "value": int(sizes[axis]), "status": result.get("status")}
    timing, _ = best_timing(result)
    if result.get("status") == "passed" and timing:
        point.update({k: timing[k] for k in ("median_us", "p20_us", "p80_us", "gbps", "pct_ceiling", "tflops")
                      if k in timing})
    if copy and copy.get("status") == "passed" and copy.get("timing"):
        point["copy_median_us"] = copy["timing"]["median_us"]
    return point


# -- what a plot shows --------------------------------------------------------------------------------
def short_title(title: str, width: int = 22) -> str:
    """A version's title cut to its first clause and `width` characters, for a tick label."""
    first = re.split(r"[:;,(]", title or "", maxsplit=1)[0].strip()
    return first if len(first) <= width else first[: width - 1].rstrip() + "…"


def version_bars(fam: dict) -> list[dict]:
    """Per version in order: its label, status and best figures (None where it has none)."""
    bars = []
    for v in sorted(fam.get("versions", []), key=lambda v: v.get("version", 0)):
        timing, _ = best_timing(v)
        ok = v.get("status") == "passed" and bool(timing)
        status = v.get("status", "?")
        bars.append({"version": v.get("version"), "ok": ok, "status": status,
                     "label": f"{v.get('version')}\n{short_title(v.get('title', '')) if ok else status.replace('_', ' ')}",
                     "median_us": timing["median_us"] if ok else None,
                     "p20_us": timing.get("p20_us", timing["median_us"]) if ok else None,
                     "p80_us": timing.get("p80_us", timing["median_us"]) if ok else None,
                     "pct_ceiling": timing.get("pct_ceiling") if ok else None,
                     "tflops": timing.get("tflops") if ok else None})
    return bars


def baseline(fam: dict, name: str) -> dict | None:
    """A passed baseline ("torch" or "copy") as {median_us, p20_us, p80_us, pct_ceiling}, else None."""
    row = fam.get(name)
    if not isinstance(row, dict) or row.get("status") != "passed" or not row.get("timing"):
        return None
    return {**row["timing"], "pct_ceiling": row.get("pct_ceiling")}


def best_version(fam: dict) -> dict | None:
    """The family's fastest passing version's bar (the file's "best_version" when it names one)."""
    timed = [b for b in version_bars(fam) if b["ok"]]
    named = [b for b in timed if b["version"] == fam.get("best_version")]
    if named:
        return named[0]
    return min(timed, key=lambda b: b["median_us"]) if timed else None


def needs_log(values) -> bool:
    values = [v for v in values if v and v > 0]
    return bool(values) and max(values) / min(values) > LOG_SPREAD


def tflops_at(flops: float | None, median_us: float | None) -> float | None:
    if not flops or not median_us:
        return None
    return flops / (median_us * 1e-6) / 1e12


def roofline_points(payload: dict) -> list[dict]:
    """The compute-bound families' best versions (and torch): intensity (FLOP/byte) and TFLOP/s."""
    points = []
    for fam in payload["families"]:
        best = best_version(fam)
        if not fam.get("flops") or not fam.get("bytes") or best is None:
            continue
        torch = baseline(fam, "torch")
        points.append({"family": family_label(fam), "intensity": fam["flops"] / fam["bytes"],
                       "tflops": best["tflops"] or tflops_at(fam["flops"], best["median_us"]),
                       "torch_tflops": tflops_at(fam["flops"], torch["median_us"]) if torch else None})
    return points


def copy_shares(payload: dict) -> list[dict]:
    """The memory-bound families' best versions as a share of a copy of the same bytes (the
    copy's time over the version's; the device ceiling when the file has no copy), sorted."""
    shares = []
    for fam in payload["families"]:
        best = best_version(fam)
        if fam.get("flops") or best is None:
            continue
        copy = baseline(fam, "copy")
        if copy:
            shares.append({"family": family_label(fam), "pct": 100.0 * copy["median_us"] / best["median_us"],
                           "of": "copy"})
        elif best["pct_ceiling"] is not None:
            shares.append({"family": family_label(fam), "pct": best["pct_ceiling"], "of": "ceiling"})
    return sorted(shares, key=lambda s: s["pct"])


def family_label(fam: dict) -> str:
    return _label(family_key(fam))


def file_name(fam: dict) -> str:
    name, precision = family_key(fam)
    stem = name if precision == "fp32" else f"{name}-{precision}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", stem) + ".png"


def _sizes_text(sizes: dict | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (sizes or {}).items())


# -- drawing --------------------------------------------------------------------------------------------
def _figure(width: float, height: float, rows: int = 1, cols: int = 1, **kw):
    """A figure on the Agg canvas and its axes; WorkbenchError when matplotlib is missing."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise WorkbenchError("matplotlib is not installed: pip install matplotlib") from None
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def save_png(fig, path: str | os.PathLike) -> Path:
    """Write the figure as a PNG atomically: to a temporary name in the same folder, then renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png", dpi=DPI)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _log_y(ax) -> None:
    """A logarithmic y axis labelled in plain numbers (20, 50, 100: not 2 x 10^1)."""
    from matplotlib.ticker import FuncFormatter
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))


def spaced_ticks(values: list[int], most: int = 12) -> list[int]:
    """At most `most` of the values, none closer to the last kept than 1/most of the span on a
    log axis (so that labels of near values do not overprint); the first and last always kept."""
    values = sorted(set(values))
    if len(values) < 3:
        return values
    gap = math.log(values[-1] / values[0]) / most
    kept = [values[0]]
    for v in values[1:-1]:
        if math.log(v / kept[-1]) >= gap and math.log(values[-1] / v) >= gap:
            kept.append(v)
    return kept + [values[-1]]


def _hline(ax, y: float | None, label: str, color: str, style: str = "--") -> None:
    if y:
        ax.axhline(y, color=color, linestyle=style, linewidth=1.2, label=label)


def _time_panel(ax, bars: list[dict], fam: dict, best: int | None) -> None:
    xs = range(len(bars))
    ok = [b for b in bars if b["ok"]]
    torch, copy = baseline(fam, "torch"), baseline(fam, "copy")
    for x, b in zip(xs, bars):
        if not b["ok"]:
            continue
        err = [[b["median_us"] - b["p20_us"]], [b["p80_us"] - b["median_us"]]]
        ax.bar(x, b["median_us"], yerr=err, capsize=3, width=0.7,
               color="tab:green" if b["version"] == best else "tab:blue")
        ax.annotate(fmt_us(b["median_us"]), (x, b["p80_us"]), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=7)
    if torch:
        _hline(ax, torch["median_us"], f"torch {fmt_us(torch['median_us'])}", "tab:orange")
    if copy:
        _hline(ax, copy["median_us"], f"copy of the same bytes {fmt_us(copy['median_us'])}", "tab:gray")
    times = [b["median_us"] for b in ok] + [r["median_us"] for r in (torch, copy) if r]
    if needs_log(times):
        _log_y(ax)
    ax.set_ylabel("best median time per launch (µs)\nbars: p20-p80")
    if torch or copy:
        ax.legend(loc="best", fontsize=8)


def _rate_panel(ax, bars: list[dict], fam: dict, meta: dict) -> None:
    xs = list(range(len(bars)))
    torch, copy = baseline(fam, "torch"), baseline(fam, "copy")
    if fam.get("flops"):
        ax.bar(xs, [b["tflops"] or tflops_at(fam["flops"], b["median_us"]) or 0 for b in bars],
               color="tab:purple", width=0.7)
        _hline(ax, tflops_at(fam["flops"], torch and torch["median_us"]), "torch", "tab:orange")
        precision = family_key(fam)[1]
        for i, name in enumerate(PEAKS_FOR.get(precision, ())):
            peak = (meta.get("peaks") or {}).get(name)
            _hline(ax, peak, f"measured {name} peak {peak or 0:.0f}", f"C{i + 3}", ":")
        ax.set_ylabel("TFLOP/s")
    else:
        ax.bar(xs, [b["pct_ceiling"] or 0 for b in bars], color="tab:cyan", width=0.7)
        _hline(ax, torch and torch["pct_ceiling"], "torch", "tab:orange")
        _hline(ax, copy and copy["pct_ceiling"], "copy of the same bytes", "tab:gray")
        ax.axhline(100, color="black", linewidth=0.6)
        gbps = (meta.get("ceiling") or {}).get("gbps")
        ax.set_ylabel("% of the copy ceiling" + (f"\n({gbps:.0f} GB/s)" if gbps else ""))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)


def plot_family(family_dict: dict, meta: dict, path: str | os.PathLike) -> Path:
    """One family's PNG: best time per version with its band and the baselines; below, the share
    of the copy ceiling (memory-bound) or TFLOP/s (compute-bound)."""
    fam = family_dict
    bars = version_bars(fam)
    best = best_version(fam)
    fig, axes = _figure(max(6.5, 1.15 * len(bars) + 3), 7.5, 2, 1, sharex=True)
    top, bottom = axes[0][0], axes[1][0]
    _time_panel(top, bars, fam, best and best["version"])
    _rate_panel(bottom, bars, fam, meta)
    bottom.set_xticks(range(len(bars)), [b["label"] for b in bars], fontsize=8)
    for tick, b in zip(bottom.get_xticklabels(), bars):
        if not b["ok"]:
            tick.set_color("tab:red")
    device = (meta.get("device") or {}).get("name", "")
    sizes = _sizes_text(fam.get("sizes") or next((v.get("sizes") for v in fam.get("versions", []) if v.get("sizes")), None))
    fig.suptitle(f"{family_label(fam)} at {sizes}" + (f" on {device}" if device else ""), fontsize=11)
    return save_png(fig, path)


def _roof(ax, points: list[dict], meta: dict) -> None:
    gbps = (meta.get("ceiling") or {}).get("gbps")
    peaks = {k: v for k, v in (meta.get("peaks") or {}).items() if v}
    xs = [p["intensity"] for p in points]
    lo = min(xs + [1.0]) / 4
    hi = max(xs + [max(peaks.values(), default=0) * 1e3 / gbps if gbps else 1.0]) * 4
    if gbps:
        top = max(peaks.values(), default=None)
        end = min(hi, top * 1e3 / gbps) if top else hi
        ax.plot([lo, end], [gbps * lo / 1e3, gbps * end / 1e3], color="black",
                label=f"memory roof {gbps:.0f} GB/s")
        for i, (name, peak) in enumerate(sorted(peaks.items(), key=lambda kv: kv[1])):
            ax.plot([peak * 1e3 / gbps, hi], [peak, peak], color=f"C{i + 3}", linestyle=":",
                    label=f"{name} peak {peak:.0f} TFLOP/s")
    torch_label = "torch"
    for p in points:
        ax.scatter(p["intensity"], p["tflops"], color="tab:blue", zorder=3)
        if p["torch_tflops"]:
            ax.scatter(p["intensity"], p["torch_tflops"], marker="x", color="tab:orange", zorder=3, label=torch_label)
            torch_label = None
    ax.set_xscale("log")
    ax.set_yscale("log")
    if points and not peaks:  # the memory roof alone rises far above: keep the points readable
        ax.set_ylim(top=30 * max(p["tflops"] for p in points))
    _label_points(ax, points)
    ax.set_xlabel("arithmetic intensity (FLOP / byte that must move)")
    ax.set_ylabel("TFLOP/s (best version)")
    ax.set_title("compute-bound families" + ("" if peaks else " (no measured compute peaks in this file)"),
                 fontsize=10)
    if not points:
        ax.text(0.5, 0.5, "no family counts FLOPs", transform=ax.transAxes, ha="center")
    ax.legend(loc="lower right", fontsize=8)


def stack_labels(anchors: list[tuple[float, float, float]], height: float) -> list[float]:
    """Label heights for points on log axes, so that no two labels overprint: `anchors` holds
    (log10 x, log10 y, label width in decades of x) per point; each label starts at its point's
    height and moves down by `height` (decades of y) while it overlaps one placed before it
    (highest points placed first). Returns each label's log10 y, in the order given."""
    placed: list[tuple[float, float, float]] = []
    out = [0.0] * len(anchors)
    for i in sorted(range(len(anchors)), key=lambda i: -anchors[i][1]):
        x, y, width = anchors[i]
        while any(x < px + pw and px < x + width and abs(y - py) < height for px, py, pw in placed):
            y -= height
        placed.append((x, y, width))
        out[i] = y
    return out


def _label_points(ax, points: list[dict], fontsize: float = 7) -> None:
    """Each point's family name beside it, stacked where points crowd (a line to a moved label)."""
    if not points:
        return
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    box = ax.get_position().transformed(ax.figure.transFigure)  # the axes' size, in pixels
    per_point_x = math.log10(x1 / x0) / (box.width / ax.figure.dpi * 72)
    per_point_y = math.log10(y1 / y0) / (box.height / ax.figure.dpi * 72)
    pad = 4 * per_point_x
    anchors = [(math.log10(p["intensity"]) + pad, math.log10(p["tflops"]), 0.6 * fontsize * len(p["family"]) * per_point_x)
               for p in points]
    for p, (x, _, _), y in zip(points, anchors, stack_labels(anchors, 1.3 * fontsize * per_point_y)):
        moved = abs(y - math.log10(p["tflops"])) > 1e-9
        ax.annotate(p["family"], (p["intensity"], p["tflops"]), xytext=(10 ** x, 10 ** y), textcoords="data",
                    fontsize=fontsize, va="center",
                    arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.6} if moved else None)


def _shares(ax, shares: list[dict]) -> None:
    ys = range(len(shares))
    ax.barh(list(ys), [s["pct"] for s in shares], color=["tab:cyan" if s["of"] == "copy" else "tab:olive" for s in shares])
    ax.set_yticks(list(ys), [s["family"] + ("" if s["of"] == "copy" else " *") for s in shares], fontsize=8)
    ax.axvline(100, color="black", linewidth=0.8)
    for y, s in zip(ys, shares):
        ax.annotate(f"{s['pct']:.0f}%", (s["pct"], y), textcoords="offset points", xytext=(3, -3), fontsize=7)
    ax.set_xlabel("best version: % of a copy of the same bytes (* of the device's copy ceiling)")
    ax.set_title("memory-bound families", fontsize=10)
    if not shares:
        ax.text(0.5, 0.5, "no memory-bound family", transform=ax.transAxes, ha="center")


def plot_roofline(payload: dict, path: str | os.PathLike) -> Path:
    """Every family's best version: a roofline of the compute-bound ones, and the memory-bound
    ones as a sorted bar chart of their share of a same-size copy."""
    check_payload(payload)
    shares = copy_shares(payload)
    fig, axes = _figure(15, max(6.0, 0.28 * len(shares) + 1.5), 1, 2)
    _roof(axes[0][0], roofline_points(payload), payload)
    _shares(axes[0][1], shares)
    device = (payload.get("device") or {}).get("name", "")
    fig.suptitle("every family's best version" + (f" on {device}" if device else ""), fontsize=11)
    return save_png(fig, path)


def plot_sweep(sweep: dict, path: str | os.PathLike) -> Path:
    """Time (median and p20-p80 band) and % of the copy ceiling against a swept size, log2 x axis."""
    points = sorted((p for p in sweep.get("points", []) if p.get("median_us")), key=lambda p: p["value"])
    if not points:
        raise WorkbenchError(f"nothing to plot: no timed point in the sweep of {sweep.get('axis', '?')}")
    axis = sweep.get("axis", "size")
    xs = [p["value"] for p in points]
    fig, axes = _figure(9, 7, 2, 1, sharex=True)
    top, bottom = axes[0][0], axes[1][0]
    top.plot(xs, [p["median_us"] for p in points], marker="o", color="tab:blue", label="median")
    top.fill_between(xs, [p.get("p20_us", p["median_us"]) for p in points],
                     [p.get("p80_us", p["median_us"]) for p in points], color="tab:blue", alpha=0.25, label="p20-p80")
    copies = [(p["value"], p["copy_median_us"]) for p in points if p.get("copy_median_us")]
    if copies:
        top.plot(*zip(*copies), linestyle="--", color="tab:gray", label="copy of the same bytes")
    failed = [p["value"] for p in sweep.get("points", []) if not p.get("median_us")]
    if failed:
        top.scatter(failed, [points[0]["median_us"]] * len(failed), marker="x", color="tab:red", label="not timed")
    if needs_log([p["median_us"] for p in points]):
        _log_y(top)
    top.set_ylabel("time per launch (µs)")
    top.legend(loc="best", fontsize=8)
    bottom.plot(xs, [p.get("pct_ceiling") for p in points], marker="o", color="tab:cyan", label="% of copy ceiling")
    bottom.axhline(100, color="black", linewidth=0.6)
    bottom.set_ylabel("% of the copy ceiling")
    if any(p.get("tflops") for p in points):
        twin = bottom.twinx()
        twin.plot(xs, [p.get("tflops") for p in points], marker="s", color="tab:purple", label="TFLOP/s")
        twin.set_ylabel("TFLOP/s", color="tab:purple")
    bottom.set_xscale("log", base=2)
    ticks = spaced_ticks([p["value"] for p in sweep["points"]])
    bottom.set_xticks(ticks, [str(x) for x in ticks], fontsize=8)
    bottom.minorticks_off()
    bottom.set_xlabel(axis)
    device = (sweep.get("device") or {}).get("name", "")
    fig.suptitle(f"{sweep.get('family', '?')} {sweep.get('version', '')}: time against {axis}"
                 + (f" on {device}" if device else ""), fontsize=11)
    return save_png(fig, path)


def plot_results(payload: dict, out_dir: str | os.PathLike) -> list[Path]:
    """Every family's PNG and the roofline into `out_dir` (created); returns the paths written."""
    check_payload(payload)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {k: v for k, v in payload.items() if k != "families"}
    paths = [plot_family(fam, meta, out / file_name(fam)) for fam in payload["families"]]
    paths.append(plot_roofline(payload, out / "roofline.png"))
    return paths
