"""Report: rich tables for `run` and `bench`, and the JSON file, from result dicts.

Everything here is a pure function of recorded results, so it is tested without a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

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


def status_text(res: dict) -> Text:
    status = res.get("status", "?")
    label = {"timed_out": "timed out", "compile_error": "compile error"}.get(status, status)
    return Text(label, style=STATUS_STYLE.get(status, ""))


def reason_line(res: dict) -> str:
    status = res.get("status")
    if status == "passed":
        return ""
    if status == "failed" and not res.get("reason"):
        bad = first_failure(res)
        if bad:
            arg = next(a for a in bad["args"] if not a["ok"])
            return (f"{arg['name']} wrong at {_sizes(bad['sizes'])} seed {bad['seed']} block {bad['block_size']}"
                    f" ({bad['when']}): {arg['bad']}/{arg['total']} elements, max abs err {arg['max_abs']:.3g}")
    return str(res.get("reason", ""))


def _sizes(sizes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def first_failure(res: dict) -> dict | None:
    failures = res.get("failures") or []
    return failures[0] if failures else None


def device_line(meta: dict) -> str:
    d, c = meta["device"], meta["ceiling"]
    driver = d.get("driver_version") or d["driver"]
    return (f"{d['name']} ({d['sms']} SMs, {d['l2_bytes'] / 2**20:.0f} MiB L2, cc {d['compute_capability']}, "
            f"driver {driver}, CUDA {d['cuda']}); measured copy ceiling {c['gbps']:.0f} GB/s")


def check_line(res: dict) -> Text:
    if res.get("status") != "passed":
        return Text.assemble(status_text(res), ": ", reason_line(res))
    c = res.get("check") or {}
    text = (f"passed: every element at {len(c.get('sizes', []))} size sets x {len(c.get('seeds', []))} seeds x "
            f"{len(c.get('block_sizes', []))} block sizes ({c.get('count', 0)} checks, max abs err {c.get('max_abs', 0):.2g})")
    if c.get("after_timing"):
        text += ", re-checked after timing"
    skipped = {json.dumps(s["sizes"], sort_keys=True) for s in res.get("skipped_sizes", [])}
    if skipped:
        text += f"; {len(skipped)} size set(s) outside its preconditions skipped"
    return Text(text, style="green")


def failure_details(res: dict) -> Table | None:
    bad = first_failure(res)
    if not bad:
        return None
    table = Table(title=f"first mismatches at {_sizes(bad['sizes'])} seed {bad['seed']} "
                        f"block {bad['block_size']} ({bad['when']})", title_justify="left")
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


def run_report(res: dict, meta: dict, torch: dict | None = None, copy: dict | None = None) -> Group:
    """`workbench run`: header, check, one row per block size, best configuration, torch."""
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("device", device_line(meta))
    if res.get("sizes"):
        head.add_row("sizes", _sizes(res["sizes"]))
    for name, r in sorted((res.get("resources") or {}).items()):
        spills = (f"{r['spill_stores']}/{r['spill_loads']} B spilled" if r["spill_stores"] or r["spill_loads"]
                  else "no spills")
        head.add_row("kernel", f"{name}: {r['registers']} regs, {spills}, {r['stack']} B stack, "
                               f"{r['shared']} B static smem")
    for line in res.get("launches", []):
        head.add_row("launch", line)
    head.add_row("check", check_line(res))
    if res.get("compiler_warnings"):
        head.add_row("nvcc", Text(res["compiler_warnings"], style="yellow"))
    parts: list[Any] = [Panel(head, title=f"[bold]{res['family']} {res['version']}[/]: {escape(res.get('title', ''))}",
                              title_align="left")]
    details = failure_details(res)
    if details is not None:
        parts.append(details)
    timings = res.get("timings") or {}
    if timings:
        has_flops = any("tflops" in t for t in timings.values())
        table = Table(title="time per launch (L2 flushed before each; median of repeats)", title_justify="left")
        for col in ["block size", "median", "p20-p80", "GB/s", "% of ceiling", "noise", "reps"] + (
                ["TFLOP/s"] if has_flops else []):
            table.add_column(col, justify="right")
        best = str(res.get("best_block_size"))
        for bs, t in timings.items():
            style = "bold green" if bs == best else ""
            row = [bs if bs != "None" else "-", fmt_us(t["median_us"]) + ("" if t.get("drained", True) else " †"),
                   f"{fmt_us(t['p20_us'])} - {fmt_us(t['p80_us'])}", fmt_gbps(t["gbps"]),
                   f"{t['pct_ceiling']:.1f}%", f"{100 * t['noise']:.1f}%", str(t["reps"])]
            if has_flops:
                row.append(f"{t.get('tflops', 0):.1f}")
            table.add_row(*row, style=style)
        for bs, why in (res.get("unusable_block_sizes") or {}).items():
            table.add_row(bs, Text(f"not launched: {why}", style="yellow"), "", "", "", "", "")
        parts.append(table)
        if not all(t.get("drained", True) for t in timings.values()):
            parts.append(Text("† too short to time with the L2 drain: flushed before, not drained after "
                              "(its dirty output in L2 is not charged)", style="yellow"))
        b = res["best"]
        line = Text.assemble(("best: ", "bold"), f"block size {res.get('best_block_size') or '-'}, "
                             f"{fmt_us(b['median_us'])}, {b['gbps']:.0f} GB/s = {b['pct_ceiling']:.1f}% of the "
                             f"measured copy ceiling")
        parts.append(line)
        if copy and copy.get("status") == "passed":
            ct = copy["timing"]["median_us"]
            parts.append(Text(f"a plain copy of the same bytes, timed the same way: {fmt_us(ct)} "
                              f"({copy['pct_ceiling']:.1f}% of the ceiling); this version takes "
                              f"{b['median_us'] / ct:.2f}x as long"))
        nbytes = b["gbps"] * b["median_us"] * 1e3
        if l2_suspect(b["pct_ceiling"], nbytes, meta["device"].get("l2_bytes")):
            parts.append(Text(L2_WARNING, style="yellow"))
    parts.append(torch_line(torch, res))
    return Group(*[p for p in parts if p is not None])


def torch_line(torch: dict | None, res: dict | None = None) -> Text | None:
    if torch is None:
        return None
    if torch.get("status") != "passed":
        return Text(f"torch: {torch.get('reason', torch.get('status'))}", style="dim")
    t = torch["timing"]
    text = Text.assemble(("torch ", "bold"), f"{torch['expression']}: {fmt_us(t['median_us'])}, "
                         f"{torch['gbps']:.0f} GB/s ({torch['pct_ceiling']:.1f}%)")
    if res and res.get("best"):
        speed = t["median_us"] / res["best"]["median_us"]
        if speed >= 1:
            text.append(f"  -> this version is {speed:.2f}x faster than torch", style="green")
        else:
            text.append(f"  -> torch is {1 / speed:.2f}x faster than this version", style="red")
    return text


def bench_table(fam: dict, l2_bytes: float | None = None) -> Group:
    """`workbench bench`: one row per version, best block size each, plus the torch row."""
    sizes = _sizes(fam["sizes"])
    has_flops = any((v.get("best") or {}).get("tflops") for v in fam["versions"])
    table = Table(title=f"[bold]{fam['family']}[/] at {sizes} ({fmt_bytes(fam['bytes'])} moved)"
                        + (f", {fam['flops'] / 1e9:.1f} GFLOP" if fam.get("flops") else ""),
                  title_justify="left")
    for col, j in (("v", "right"), ("title", "left"), ("status", "left"), ("block", "right"),
                   ("median", "right"), ("p20-p80", "right"), ("GB/s", "right"), ("% ceil", "right")) + (
            (("TFLOP/s", "right"),) if has_flops else ()) + (("vs v1", "right"), ("vs torch", "right")):
        table.add_column(col, justify=j, overflow="fold")
    for v in fam["versions"]:
        b = v.get("best")
        row = [str(v.get("version")), Text(v.get("title", "")), status_text(v),
               str(v.get("best_block_size") or "-") if b else "",
               fmt_us(b["median_us"]) if b else "", f"{fmt_us(b['p20_us'])}-{fmt_us(b['p80_us'])}" if b else "",
               fmt_gbps(b["gbps"]) if b else "",
               Text(f"{b['pct_ceiling']:.1f}%" + ("*" if l2_suspect(b["pct_ceiling"], fam["bytes"], l2_bytes) else ""),
                    style="yellow" if l2_suspect(b["pct_ceiling"], fam["bytes"], l2_bytes) else "") if b else ""]
        if has_flops:
            row.append(f"{b['tflops']:.1f}" if b and b.get("tflops") else "")
        row += [f"{v['speedup_vs_first']:.2f}x" if "speedup_vs_first" in v else "",
                f"{v['speedup_vs_torch']:.2f}x" if "speedup_vs_torch" in v else ""]
        style = "bold" if v.get("version") == fam.get("best_version") else ""
        table.add_row(*row, style=style)
    copy = fam.get("copy")
    if copy and copy.get("status") == "passed":
        t = copy["timing"]
        table.add_row("", Text("copy of the same bytes (the ceiling at this size)"), status_text(copy), "",
                      fmt_us(t["median_us"]), f"{fmt_us(t['p20_us'])}-{fmt_us(t['p80_us'])}",
                      f"{copy['gbps']:.0f}", f"{copy['pct_ceiling']:.1f}%", *([""] * (3 if has_flops else 2)),
                      style="dim")
    torch = fam.get("torch")
    if torch:
        if torch.get("status") == "passed":
            t = torch["timing"]
            row = ["", Text(f"torch: {torch['expression']}"), status_text(torch), "", fmt_us(t["median_us"]),
                   f"{fmt_us(t['p20_us'])}-{fmt_us(t['p80_us'])}", f"{torch['gbps']:.0f}",
                   f"{torch['pct_ceiling']:.1f}%"] + ([f"{torch.get('tflops', 0):.1f}"] if has_flops else []) + ["", "1.00x"]
        else:
            row = ["", "torch", Text(torch.get("reason", ""), style="dim"), *[""] * (9 if has_flops else 8)]
        table.add_row(*row, style="cyan")
    notes = [Text.assemble(f"  version {v.get('version')} ", status_text(v), f": {reason_line(v)}")
             for v in fam["versions"] if v.get("status") != "passed"]
    if any(l2_suspect((v.get("best") or {}).get("pct_ceiling", 0), fam["bytes"], l2_bytes) for v in fam["versions"]):
        notes.append(Text(f"* {L2_WARNING}", style="yellow"))
    return Group(table, *notes)


def bench_payload(meta: dict, families: Iterable[dict]) -> dict:
    return {"workbench": 1, **meta, "families": list(families)}


def write_json(path: str | Path, payload: dict) -> None:
    """Write atomically: a crash mid-write never leaves half a results file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)
