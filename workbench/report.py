"""Report: everything the CLI shows, rendered with rich from typed records (results.py), the
contract (family.py) and the trainer's figures. Pure functions of what they are given, so they
are tested without a GPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rich.console import Group
from rich.markup import escape
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .family import Family, Version
from .results import FamilyResult, Row

STATUS_STYLE = {"passed": "green", "failed": "bold red", "crashed": "bold red", "timed_out": "bold red",
                "compile_error": "bold red", "error": "bold red", "refused": "yellow",
                "unavailable": "dim", "no_gpu": "bold red"}

# A memory-bound kernel above this share of the copy ceiling is suspect when its bytes could fit
# in L2 (a few times its size): some may have been served by, or left in, L2 instead of DRAM.
# Far larger working sets cannot hide in L2; there, read-heavy kernels legitimately beat the
# copy, which pays for read/write turnarounds on the memory bus.
L2_SUSPECT_PCT = 93.0
L2_SUSPECT_FACTOR = 4
L2_WARNING = (f"note: above {L2_SUSPECT_PCT:.0f}% of the copy ceiling with a working set under {L2_SUSPECT_FACTOR}x "
              "the L2: part of the traffic may have stayed in L2. Check with ncu's dram__bytes metrics.")


def l2_suspect(pct: float, nbytes: float | None, l2_bytes: float | None) -> bool:
    if pct <= L2_SUSPECT_PCT:
        return False
    return nbytes is None or not l2_bytes or nbytes < L2_SUSPECT_FACTOR * l2_bytes


# -- numbers -----------------------------------------------------------------------------------
def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 10000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.1f} µs" if us >= 10 else f"{us:.2f} µs"


def fmt_gbps(gbps: float) -> str:
    return f"{gbps:.0f}" if gbps >= 10 else f"{gbps:.2f}"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_block(bs: int | None) -> str:
    return "-" if bs is None else str(bs)


def _sizes(sizes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


# -- a row's status -----------------------------------------------------------------------------
def status_text(row: Row) -> Text:
    label = {"timed_out": "timed out", "compile_error": "compile error"}.get(row.status, row.status)
    return Text(label, style=STATUS_STYLE.get(row.status, ""))


def reason_line(row: Row) -> str:
    if row.passed:
        return ""
    if row.status == "failed" and not row.reason and row.failures:
        bad = row.failures[0]
        arg = next(a for a in bad["args"] if not a["ok"])
        return (f"{arg['name']} wrong at {_sizes(bad['sizes'])} seed {bad['seed']} block {fmt_block(bad['block_size'])}"
                f" ({bad['when']}): {arg['bad']}/{arg['total']} elements, max abs err {arg['max_abs']:.3g}")
    return str(row.reason or "")


def device_line(meta: dict) -> str:
    d, c = meta["device"], meta["ceiling"]
    driver = d.get("driver_version") or d["driver"]
    return (f"{d['name']} ({d['sms']} SMs, {d['l2_bytes'] / 2**20:.0f} MiB L2, cc {d['compute_capability']}, "
            f"driver {driver}, CUDA {d['cuda']}); measured copy ceiling {c['gbps']:.0f} GB/s")


def check_line(row: Row) -> Text:
    if not row.passed:
        return Text.assemble(status_text(row), ": ", reason_line(row))
    c = row.check
    if c is None:
        return Text("passed", style="green")
    text = (f"passed: every element at {len(c.sizes)} size sets x {len(c.seeds)} seeds x "
            f"{len(c.block_sizes)} block sizes ({c.count} checks, max abs err {c.max_abs:.2g})")
    if c.after_timing:
        text += ", re-checked after timing"
    if row.skipped_sizes:
        text += f"; {len(row.skipped_sizes)} size set(s) outside its preconditions skipped"
    return Text(text, style="green")


def failure_details(row: Row) -> Table | None:
    if not row.failures:
        return None
    bad = row.failures[0]
    table = Table(title=f"first mismatches at {_sizes(bad['sizes'])} seed {bad['seed']} "
                        f"block {fmt_block(bad['block_size'])} ({bad['when']})", title_justify="left")
    for col in ("output", "where", "expected", "got", "max abs err", "max rel err", "wrong"):
        table.add_column(col, justify="right" if col not in ("output", "where") else "left")
    for arg in bad["args"]:
        if arg["ok"]:
            continue
        for i, m in enumerate(arg["first"]):
            table.add_row(arg["name"] if i == 0 else "", m["where"], f"{m['expected']:.6g}", f"{m['got']:.6g}",
                          f"{arg['max_abs']:.3g}" if i == 0 else "", f"{arg['max_rel']:.3g}" if i == 0 else "",
                          f"{arg['bad']}/{arg['total']}" if i == 0 else "")
    return table


# -- run: one version ---------------------------------------------------------------------------
def run_report(row: Row, meta: dict, torch: Row | None = None, copy: Row | None = None) -> Group:
    """`workbench run`: header, check, one row per block size, best configuration, baselines."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("device", device_line(meta))
    if row.sizes:
        head.add_row("sizes", _sizes(row.sizes))
    for name, r in sorted(row.resources.items()):
        spills = (f"{r['spill_stores']}/{r['spill_loads']} B spilled" if r["spill_stores"] or r["spill_loads"]
                  else "no spills")
        head.add_row("kernel", f"{name}: {r['registers']} regs, {spills}, {r['stack']} B stack, "
                               f"{r['shared']} B static smem")
    for line in row.launches:
        head.add_row("launch", line)
    head.add_row("check", check_line(row))
    if row.compiler_warnings:
        head.add_row("nvcc", Text(row.compiler_warnings, style="yellow"))
    parts: list[Any] = [Panel(head, title=f"[bold]{row.family} {row.version}[/]: {escape(row.title)}",
                              title_align="left")]
    details = failure_details(row)
    if details is not None:
        parts.append(details)
    if row.timings:
        has_flops = any(m.tflops for m in row.timings.values())
        table = Table(title="time per launch (L2 flushed before each; median of repeats, ± its 95% confidence "
                      "interval; noise = the p20-p80 spread of single launches)", title_justify="left")
        for col in ["block size", "median", "± (95%)", "p20-p80", "GB/s", "% of ceiling", "noise", "reps"] + (
                ["TFLOP/s"] if has_flops else []):
            table.add_column(col, justify="right")
        best = row.best
        for bs, m in row.timings.items():
            t = m.timing
            cells = [fmt_block(bs), fmt_us(t.median_us) + ("" if t.drained else " †"),
                     "-" if t.ci is None else f"±{100 * t.ci:.1f}%",
                     f"{fmt_us(t.p20_us)} - {fmt_us(t.p80_us)}", fmt_gbps(m.gbps), f"{m.pct_ceiling:.1f}%",
                     f"{100 * t.noise:.1f}%", str(t.reps)]
            if has_flops:
                cells.append(f"{m.tflops or 0:.1f}")
            table.add_row(*cells, style="bold green" if m is best else "")
        for bs, why in row.unusable_block_sizes.items():
            table.add_row(fmt_block(bs), Text(f"not launched: {why}", style="yellow"), "", "", "", "", "")
        parts.append(table)
        if not all(m.timing.drained for m in row.timings.values()):
            parts.append(Text("† too short to time with the L2 drain: flushed before, not drained after "
                              "(its dirty output in L2 is not charged)", style="yellow"))
        parts.append(Text.assemble(("best: ", "bold"), f"block size {fmt_block(best.block_size)}, "
                                   f"{fmt_us(best.median_us)}, {best.gbps:.0f} GB/s = {best.pct_ceiling:.1f}% of the "
                                   f"measured copy ceiling"))
        if copy and copy.passed and copy.best:
            ct = copy.best.median_us
            parts.append(Text(f"a plain copy of the same bytes, timed the same way: {fmt_us(ct)} "
                              f"({copy.best.pct_ceiling:.1f}% of the ceiling); this version takes "
                              f"{best.median_us / ct:.2f}x as long{kept_note(copy)}"))
        nbytes = best.gbps * best.median_us * 1e3
        if l2_suspect(best.pct_ceiling, nbytes, meta["device"].get("l2_bytes")):
            parts.append(Text(L2_WARNING, style="yellow"))
    parts.append(torch_line(torch, row))
    return Group(*[p for p in parts if p is not None])


def torch_line(torch: Row | None, row: Row | None = None) -> Text | None:
    if torch is None:
        return None
    if not torch.passed or not torch.best:  # why, as for a version: which output, where, how far off
        return Text(f"torch: {reason_line(torch) or torch.status}", style="dim")
    b = torch.best
    text = Text.assemble(("torch ", "bold"), f"{torch.expression}: {fmt_us(b.median_us)}, "
                         f"{b.gbps:.0f} GB/s ({b.pct_ceiling:.1f}%)")
    if row and row.best:
        speed = b.median_us / row.best.median_us
        if speed >= 1:
            text.append(f"  -> this version is {speed:.2f}x faster than torch", style="green")
        else:
            text.append(f"  -> torch is {1 / speed:.2f}x faster than this version", style="red")
    text.append(kept_note(torch), style="dim")
    return text


def kept_note(row: Row) -> str:
    """' (measured at 10:01, kept: ...)' for a baseline row reused from an earlier run."""
    when = row.extra.get("kept_from")
    if not when:
        return ""
    return f" (measured {when.replace('T', ' ')[:16]}, reused; --fresh-baselines measures again)"


# -- bench: a family ----------------------------------------------------------------------------
def bench_table(fam: FamilyResult, l2_bytes: float | None = None) -> Group:
    """`workbench bench`: one row per version (best block size each), then the baselines."""
    has_flops = any(r.best and r.best.tflops for r in fam.versions)
    table = Table(title=f"[bold]{escape(fam.label)}[/] at {_sizes(fam.sizes)} ({fmt_bytes(fam.bytes)} moved)"
                        + (f", {fam.flops / 1e9:.1f} GFLOP" if fam.flops else ""), title_justify="left")
    for col, j in (("v", "right"), ("title", "left"), ("status", "left"), ("block", "right"),
                   ("median", "right"), ("p20-p80", "right"), ("GB/s", "right"), ("% ceil", "right")) + (
            (("TFLOP/s", "right"),) if has_flops else ()) + (("vs v1", "right"), ("vs torch", "right")):
        table.add_column(col, justify=j, overflow="fold")
    best_version = fam.best_version

    def cells(row: Row, number: str, title: Text) -> list:
        b = row.best
        suspect = bool(b) and l2_suspect(b.pct_ceiling, fam.bytes, l2_bytes)
        out = [number, title, status_text(row), fmt_block(b.block_size) if b and row.kind == "version" else "",
               fmt_us(b.median_us) if b else "", f"{fmt_us(b.timing.p20_us)}-{fmt_us(b.timing.p80_us)}" if b else "",
               fmt_gbps(b.gbps) if b else "",
               Text(f"{b.pct_ceiling:.1f}%" + ("*" if suspect else ""), style="yellow" if suspect else "") if b else ""]
        if has_flops:
            out.append(f"{b.tflops:.1f}" if b and b.tflops else "")
        return out

    for row in fam.versions:
        vs_first, vs_torch = fam.speedup_vs_first(row), fam.speedup_vs_torch(row)
        table.add_row(*cells(row, str(row.version), Text(row.title)),
                      f"{vs_first:.2f}x" if vs_first and row.passed else "",
                      f"{vs_torch:.2f}x" if vs_torch and row.passed else "",
                      style="bold" if row is best_version else "")
    if fam.copy is not None:
        table.add_row(*cells(fam.copy, "", Text(fam.copy.title or "copy of the same bytes (the ceiling at this size)")),
                      "", "", style="dim")
    if fam.torch is not None:
        title = Text(f"torch: {fam.torch.expression}" if fam.torch.expression else "torch")
        if fam.torch.passed:
            table.add_row(*cells(fam.torch, "", title), "", "1.00x", style="cyan")
        else:
            table.add_row("", title, Text(reason_line(fam.torch) or fam.torch.status, style="dim"),
                          *[""] * (9 if has_flops else 8), style="cyan")
    notes = [Text.assemble(f"  {row.kind if row.kind != 'version' else 'version ' + str(row.version)} ",
                           status_text(row), f": {reason_line(row)}")
             for row in fam.rows() if not row.passed and row.status != "unavailable"]
    if any(r.best and l2_suspect(r.best.pct_ceiling, fam.bytes, l2_bytes) for r in fam.versions):
        notes.append(Text(f"* {L2_WARNING}", style="yellow"))
    return Group(table, *notes)


def row_line(row: Row) -> Text:
    """One line as a bench goes: `layernorm_forward 6: passed` (or why not)."""
    text = Text.assemble(f"  {row.label}: ", status_text(row))
    if not row.passed:
        text.append(f": {reason_line(row)}")
    return text


def time_breakdown(seconds: dict[str, float], phases: dict[str, dict[str, float]] | None = None) -> str:
    """'took 230 s (compiling 20 s, versions 150 s [check 60, time 50, ...], ...)'."""
    parts = []
    for k, v in seconds.items():
        if k == "total":
            continue
        inner = (phases or {}).get(k)
        if inner:
            rest = v - sum(inner.values())  # starting processes, waiting on them
            detail = ", ".join(f"{p} {s:.0f}" for p, s in inner.items())
            parts.append(f"{k} {v:.0f} s [{detail}, other {max(0.0, rest):.0f}]")
        else:
            parts.append(f"{k} {v:.0f} s")
    named = sum(v for k, v in seconds.items() if k != "total")
    if parts and seconds.get("total", 0) - named >= 1:  # between the named activities: the loop's own work
        parts.append(f"not accounted {seconds['total'] - named:.0f} s")
    return f"took {seconds.get('total', 0):.0f} s" + (f" ({', '.join(parts)})" if parts else "")


# -- the contract -------------------------------------------------------------------------------
def version_panel(v: Version) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    grid.add_row("title", f"[bold]{escape(v.title)}[/]")  # in the body, where it wraps: a border title is cut
    grid.add_row("file", str(v.path.relative_to(v.family.project.root)))
    if v.precision != "fp32":
        grid.add_row("precision", v.precision)
    if v.builds_on:
        grid.add_row("builds on", f"{v.family.name} {v.builds_on}: {escape(v.family.version(v.builds_on).title)}")
    elif v.builds_on == 0:
        grid.add_row("builds on", "nothing: it starts afresh")
    if v.changed:
        grid.add_row("changed", escape(v.changed))
    if v.why:
        grid.add_row("why faster", escape(v.why))
    pre = [*v.family.preconditions, *v.preconditions]
    grid.add_row("preconditions", escape(" and ".join(pre)) if pre else "none")
    if v.arch:
        grid.add_row("arch", f"{v.arch} only (refused on any other device)")
    grid.add_row("block sizes", ", ".join(str(b) for b in v.block_sizes) if v.block_sizes != (None,) else "-")
    for s in v.scratch:
        grid.add_row("scratch", f"{s.name}: {s.size} x {s.dtype}")
    for s in v.steps:
        if s.kind == "kernel":
            line = f"{s.name}<<<grid {', '.join(s.grid)}; block {', '.join(s.block)}; smem {s.shared}>>>({', '.join(s.args)})"
        elif s.kind == "memset":
            line = f"memset {s.name} = {s.value}"
        else:
            line = f"library {s.name}(" + ", ".join(f"{k}={val}" for k, val in s.params) + ")"
        if s.when:
            line += f"  when {s.when}"
        grid.add_row("launch", escape(line))
    return Panel(grid, title=f"[bold]{v.family.name} {v.number}[/]", title_align="left")


def family_panel(fam: Family) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if fam.summary:
        grid.add_row("computes", escape(fam.summary.strip()))
    for a in fam.args:
        grid.add_row(f"{a.role} {a.name}", f"{a.dtype}[{a.shape}]" + (f"  drawn as {a.init}" if a.init else ""))
    grid.add_row("sizes", fam.format_sizes(fam.default_sizes) + (
        f"  ({', '.join(f'{k} = {v}' for k, v in fam.derived.items())})" if fam.derived else ""))
    grid.add_row("test sizes", "; ".join(fam.format_sizes(s) for s in fam.test_sizes))
    grid.add_row("tolerance", f"atol {fam.atol:g}, rtol {fam.rtol:g}")
    for p in fam.precisions.values():
        grid.add_row(f"at {p.name}", f"{', '.join(f'{k} {v}' for k, v in p.args.items())}; atol {p.atol:g}, rtol {p.rtol:g}")
    grid.add_row("bytes moved", fam.bytes)
    if fam.flops:
        grid.add_row("flops", fam.flops)
    grid.add_row("reference", f"references/{fam.reference_name.split(':')[0]}.py")
    if fam.torch:
        grid.add_row("torch", escape(fam.torch))
    for v in fam.versions:
        grid.add_row(f"version {v.number}", escape(v.title) + (f"  [{v.precision}]" if v.precision != "fp32" else ""))
    return Panel(grid, title=f"[bold]{fam.name}[/]: {escape(fam.title)}", title_align="left")


def source_start(source: str) -> int:
    """Where a version's code starts, after its header comment."""
    end = source.find("*/")
    return end + 2 if end >= 0 else 0


def families_table(families: Iterable[Family]) -> Table:
    table = Table(box=None, pad_edge=False, show_header=True)
    table.add_column("family", style="bold cyan", no_wrap=True)
    table.add_column("versions")
    for fam in families:
        table.add_row(fam.name, " · ".join(f"[bold]{v.number}[/] {escape(v.title)}"
                                           + (f" [dim]({v.precision})[/]" if v.precision != "fp32" else "")
                                           for v in fam.versions))
    return table


def _column(table: Table, header: str, **kw) -> None:
    """A column that wraps (or folds) its cells instead of cutting them with an ellipsis, never
    narrower than its header's longest word: a narrow terminal makes rows taller, not unreadable."""
    table.add_column(header, overflow="fold", min_width=max(map(len, header.split())), **kw)


class Fitted:
    """The wide table where it fits the console with `room` columns left for its column `flexible`
    (wrapped there), else the narrow one: the same rows in fewer columns."""

    def __init__(self, wide: Table, narrow: Table, flexible: int, room: int = 30):
        self.wide, self.narrow, self.flexible, self.room = wide, narrow, flexible, room

    def __rich_console__(self, console, options):
        column = self.wide.columns[self.flexible]
        saved, column.max_width = column.max_width, self.room
        try:
            needs = Measurement.get(console, options.update_width(1 << 16), self.wide).maximum
        finally:
            column.max_width = saved
        yield self.wide if needs <= options.max_width else self.narrow


def resources_table(rows: Iterable[tuple[str, str, str, Any]]) -> Table:
    """`workbench compile`: ptxas's report, one line per (version, arch, kernel)."""
    table = Table(title="ptxas resources", title_justify="left")
    for col in ("version", "arch", "kernel", "regs", "spills (st/ld B)", "stack B", "static smem B"):
        _column(table, col, justify="left" if col in ("version", "kernel", "arch") else "right")
    for label, arch, name, r in rows:
        table.add_row(label, arch, name, str(r.registers), f"{r.spill_stores}/{r.spill_loads}", str(r.stack), str(r.shared))
    return table


def promoted_table(manifest: dict, where: str) -> Fitted:
    """`workbench promoted`: a column per field where the console is wide enough; in a narrower one
    (80 columns) the figures and the provenance are stacked in two columns, so the titles keep room."""
    title = f"promoted kernels ({where})"
    wide, narrow = Table(title=title, title_justify="left"), Table(title=title, title_justify="left")
    for col in ("family", "precision", "v", "title", "block", "time", "GB/s", "timed at", "GPU", "date", "sha256"):
        _column(wide, col, justify="right" if col in ("v", "block", "time", "GB/s") else "left")
    for col in ("family", "v", "title", "block", "time", "timed at, on"):
        _column(narrow, col, justify="right" if col in ("v", "block", "time") else "left")
    rows = []
    for key, e in sorted(manifest["kernels"].items()):
        rows.append((key, e, ""))
        if "fallback" in e:  # what the trainer runs where the entry's version cannot (another GPU arch)
            rows.append((key, e["fallback"], f" (off {e.get('arch', 'its arch')})"))
    for key, e, where_not in rows:
        family, precision = (e["family"] if "family" in e else key) + where_not, e.get("precision", "fp32")
        figures = (str(e["version"]), Text(e["title"]), str(e["block_size"] or "-"))
        wide.add_row(family, precision, *figures, fmt_us(e["median_us"]), f"{e['gbps']:.0f}",
                     e["timed_at"], e["gpu"], e["date"], e["sha256"][:12])
        narrow.add_row(f"{family} {precision}", *figures, f"{fmt_us(e['median_us'])}\n{e['gbps']:.0f} GB/s",
                       f"{e['timed_at']}\n{e['gpu']}\n{e['date']} {e['sha256'][:12]}")
    return Fitted(wide, narrow, flexible=3)


def written_table(files: dict) -> Table:
    """What a prepro step wrote: path, size, what it holds."""
    table = Table(box=None, pad_edge=False)
    table.add_column("wrote", style="bold cyan", no_wrap=True)
    table.add_column("bytes", justify="right")
    table.add_column("holds")
    for path, what in files.items():
        table.add_row(escape(str(path)), f"{path.stat().st_size:,}", escape(what))
    return table


# -- sanitize, doctor --------------------------------------------------------------------------------
FINDING_STYLE = {"clean": "green", "errors": "bold red", "failed": "bold red", "timed_out": "bold red",
                 "skipped": "dim"}


def sanitize_tables(findings: list, tools: Iterable[str]) -> Group:
    """A table per compute-sanitizer tool: each version's verdict and the sanitizer's first report."""
    parts = []
    for tool in tools:
        table = Table(title=f"compute-sanitizer --tool {tool}", title_justify="left")
        for col in ("version", "title", "verdict", "first report"):
            table.add_column(col, overflow="fold")
        mine = [f for f in findings if f.tool == tool]
        for f in mine:
            verdict = {"errors": f"{f.errors} error(s)", "timed_out": "timed out"}.get(f.status, f.status)
            table.add_row(f.version.label, Text(f.version.title), Text(verdict, style=FINDING_STYLE.get(f.status, "")),
                          Text("; ".join(f.lines[:2]) or f.reason))
        clean = sum(f.status == "clean" for f in mine)
        table.caption = f"{clean} of {len(mine)} clean"
        parts.append(table)
    return Group(*parts)


def doctor_table(checks: list) -> Table:
    table = Table(title="what this machine has", title_justify="left")
    for col in ("", "what", "version / problem", "needed for", "how to get it"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(Text("ok", style="green") if c.ok else Text("missing", style="bold red"), c.name,
                      Text(c.detail), c.needed_for, Text(c.fix, style="yellow"))
    return table


def ceilings_table(measured: dict) -> Table:
    table = Table(title=f"ceilings of {measured['device']['name']} (measured, cached)", title_justify="left")
    table.add_column("what")
    table.add_column("measured", justify="right")
    table.add_row("copy bandwidth (read + write, 1 GiB float4 copy or cuMemcpyDtoD)", f"{measured['ceiling']['gbps']:.0f} GB/s")
    for kind, tflops in measured.get("peaks", {}).items():
        table.add_row(f"{kind} matmul through cuBLASLt, 8192^3", f"{tflops:.1f} TFLOP/s")
    return table


def sweep_table(version: Version, axis: str, points: list) -> Table:
    """`run --sweep`: one line per size: time, bandwidth, share of the ceiling, the copy beside it."""
    table = Table(title=f"{version.label} against {axis}", title_justify="left")
    for col in (axis, "status", "block", "median", "p20-p80", "GB/s", "% ceil", "copy", "x copy"):
        table.add_column(col, justify="left" if col == "status" else "right")
    for row, copy in points:
        b = row.best
        c = copy.best if copy is not None and copy.passed else None
        table.add_row(str(row.sizes.get(axis, "?")), status_text(row) if not row.passed or not b else Text("passed", style="green"),
                      fmt_block(b.block_size) if b else "", fmt_us(b.median_us) if b else Text(reason_line(row), style="dim"),
                      f"{fmt_us(b.timing.p20_us)}-{fmt_us(b.timing.p80_us)}" if b else "", fmt_gbps(b.gbps) if b else "",
                      f"{b.pct_ceiling:.1f}%" if b else "", fmt_us(c.median_us) if c else "",
                      f"{b.median_us / c.median_us:.2f}x" if b and c else "")
    return table


# A row's phases as the watch names them: "load" is nvcc's compile after a save (a cached cubin
# loads in milliseconds), "setup" the cases opened.
WATCH_PHASES = {"load": "compile", "setup": "cases"}


def change_line(prev: Row | None, row: Row, changed: list[str] = (), seconds: float | None = None) -> Text:
    """run --watch, after each table: what was saved, how long from the save to this table and
    where it went (the row's phases), and the best time (and each block size's) against the last
    run that passed."""
    text = Text()
    if changed:
        text.append("saved " + ", ".join(Path(f).name for f in changed))
        if seconds is not None:
            text.append(f"; {seconds:.2f} s from the save to this table")
            spent = [f"{WATCH_PHASES.get(k, k)} {v:.2f} s" for k, v in row.phases.items() if v >= 0.005]
            if spent:
                text.append(f" ({', '.join(spent)})", style="dim")
        text.append(". ")
    if not row.passed or not row.best:
        text.append(f"{row.label}: {row.status}" + (" (the last passing run's numbers stand)" if prev else ""),
                    style="red")
        return text
    if prev is None or not prev.best:
        text.append(f"first run: best {fmt_us(row.best.median_us)} at block size {fmt_block(row.best.block_size)}")
        return text
    a, b = prev.best.median_us, row.best.median_us
    change = (b - a) / a
    style = "green" if change < -0.02 else "red" if change > 0.02 else ""
    text.append(f"best {fmt_us(a)} -> {fmt_us(b)} ({100 * change:+.1f}%)", style=style)
    per = [f"{fmt_block(bs)}: {100 * (m.median_us - prev.timings[bs].median_us) / prev.timings[bs].median_us:+.1f}%"
           for bs, m in row.timings.items() if bs in prev.timings and prev.timings[bs].median_us > 0]
    if per:
        text.append("  (by block size " + ", ".join(per) + ")", style="dim")
    return text


# -- profile (ncu) --------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _per_kernel(kernels: list, show) -> str:
    """One line per kernel (numbered when there are several)."""
    if len(kernels) == 1:
        return show(kernels[0])
    return "\n".join(f"{i}: {show(k)}" for i, k in enumerate(kernels, 1))


def _stall(k, i: int) -> str:
    if i >= len(k.stalls):
        return "-"
    s = k.stalls[i]
    return f"{s.reason} {s.cycles:.1f} ({s.share:.0f}%)"


PROFILE_ROWS = (
    ("duration", lambda k: fmt_us(k.duration_us)),
    ("DRAM throughput", lambda k: _pct(k.dram_pct)),
    ("SM throughput", lambda k: _pct(k.sm_pct)),
    ("achieved occupancy", lambda k: _pct(k.occupancy_pct)),
    ("registers / thread", lambda k: "-" if k.registers is None else str(k.registers)),
    ("L2 hit rate", lambda k: _pct(k.l2_hit_pct)),
    ("stall 1", lambda k: _stall(k, 0)),
    ("stall 2", lambda k: _stall(k, 1)),
    ("stall 3", lambda k: _stall(k, 2)),
)


def profile_table(profiles: list) -> Table:
    """`workbench profile`: one column per version, a row per metric, a line per kernel."""
    table = Table(title="Nsight Compute, one launch of each version", title_justify="left")
    table.add_column("", style="bold", no_wrap=True)
    for p in profiles:
        _column(table, f"{p.label}\nblock {fmt_block(p.block_size)}", justify="right")
    table.add_row("kernels", *[_per_kernel(p.kernels, lambda k: kernel_name(k.name)) if p.kernels
                               else Text(f"{p.status}: {p.reason}", style="bold red") for p in profiles])
    if any(len(p.kernels) > 1 for p in profiles):
        table.add_row("duration, all kernels", *[fmt_us(p.duration_us) for p in profiles])
    for name, show in PROFILE_ROWS:
        table.add_row(name, *[_per_kernel(p.kernels, show) if p.kernels else "" for p in profiles])
    return table


def kernel_name(name: str, width: int = 40) -> str:
    """A kernel's name without its parameter list, cut to `width` (cuBLAS's run long)."""
    name = name.split("(", 1)[0].strip() or name
    return name if len(name) <= width else name[:width - 1] + "…"


def profile_rules(profiles: list, shown=("ERR", "WRN", "OPT"), width: int = 90) -> list[str]:
    """What ncu's rules flag, a line each, the largest estimated gain first within a version:
    version (and kernel number), type, rule, estimated speedup, the rule's first sentence."""
    lines = []
    for p in profiles:
        found = [(i, r) for i, k in enumerate(p.kernels, 1) for r in k.rules if r.type in shown]
        found.sort(key=lambda f: -(f[1].speedup if f[1].speedup is not None else -1))
        for i, r in found:
            gain = f" (est. {r.speedup:.1f}% {r.speedup_type})".replace(" )", ")") if r.speedup is not None else ""
            who = p.label + (f" #{i}" if len(p.kernels) > 1 else "")
            lines.append(f"{who}: {r.type} {r.name}{gain}: {r.short(width)}")
    return lines


def profile_report(profiles: list, ncu_version: str | None, sizes: dict) -> Group:
    clocks = sorted({round(k.sm_clock_ghz, 2) for p in profiles for k in p.kernels if k.sm_clock_ghz})
    clock = f" ({', '.join(f'{c:.2f}' for c in clocks)} GHz)" if clocks else ""
    device = next((p.device.get("name") for p in profiles if p.device.get("name")), None)
    on = f" on {device}" if device else ""
    head = Text(f"ncu {ncu_version or '(version unknown)'}{on} at {_sizes(sizes)}: SM clock locked to base{clock} and "
                "caches flushed before each kernel, so durations are longer than `workbench run`'s; compare "
                "the versions here with each other.", style="dim")
    parts: list[Any] = [head, profile_table(profiles)]
    rules = profile_rules(profiles)
    if rules:
        parts.append(Text("ncu's rules (est. = its estimate of the time to gain):", style="bold"))
        parts += [Text(f"  {line}") for line in rules]
    return Group(*parts)
