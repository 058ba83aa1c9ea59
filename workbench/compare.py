"""Compare two results files: did a change help, or is it noise?

`workbench compare OLD.json NEW.json` lines the two runs up row by row. A row is a version of a
family, or one of the family's baselines: "torch" (the PyTorch equivalent) and "copy" (a plain
copy of the same bytes). A row's time is that of its best configuration (its fastest block
size): the median of the repeats and the p20-p80 band around it (the middle 60% of the samples,
the run's own spread).

The verdict, for a row that passed in both runs, with ratio = new median / old median:

  SAME     the change is within the tolerance: |ratio - 1| <= `same` (--same, default 0.03),
           or the two medians are at most `floor_us` apart (0.1 µs: a few ticks of the event
           timer, below what a microsecond-long kernel can resolve).
  FASTER   beyond the tolerance, and the two bands do not overlap: new p80 < old p20.
  SLOWER   beyond the tolerance, and the two bands do not overlap: new p20 > old p80.
  NOISY    beyond the tolerance, but the bands overlap: the two runs' samples mix, so the change
           cannot be told apart from the spread. Run both again with a longer --budget.

Both conditions are needed for FASTER or SLOWER: a 10% shift whose bands overlap is not shown
to be real (NOISY), and two tight bands that are disjoint but 1% apart are a real difference too
small to matter (SAME). A row without a band (p20/p80 missing) is treated as a zero-width band.

Rows that did not pass in both runs:

  FAILED        passed in OLD, not in NEW (failed, crashed, timed out, compile error, refused):
                a regression.
  FIXED         did not pass in OLD, passes in NEW.
  UNTIMED       passed in neither, or passed without timings (a check-only run): nothing to compare.
  ADDED         only in NEW.
  REMOVED       only in OLD.
  INCOMPARABLE  the family ran at different sizes in the two runs: its times measure different
                work, so its rows are listed but not judged.

Notes go with the comparison, never stop it: the two runs ran on different devices (every row
is still compared, e.g. to compare GPUs, but the verdicts then measure the device too), or with
a different L2-flush setting; a family's sizes differ; a row's best block size changed; a
family's copy baseline moved (the copy is the control: when it moves, the machine moved, and the
versions' verdicts may say more about the machine than about the change).

The summary counts the rows per verdict and gives the geometric mean of the ratios over the
version rows timed in both runs (baselines left out: they measure PyTorch and the machine, not
the kernels); below 1 is faster.

`regressions(comparison, threshold)` is the CI gate: the version rows that are SLOWER by more
than `threshold` (ratio > 1 + threshold, default 0.05) or FAILED. Baselines are never
regressions. NOISY rows are not either: a gate that fails on noise gets switched off.

Everything below `# -- rendering` turns a comparison (plain, JSON-ready dicts) into rich
renderables; everything above it is pure functions on the results' dicts.
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .errors import UsageError, WorkbenchError
from .results import check_payload, read_payload
from .report import fmt_us

SAME, FASTER, SLOWER, NOISY = "SAME", "FASTER", "SLOWER", "NOISY"
FAILED, FIXED, UNTIMED = "FAILED", "FIXED", "UNTIMED"
ADDED, REMOVED, INCOMPARABLE = "ADDED", "REMOVED", "INCOMPARABLE"
VERDICTS = (FASTER, SLOWER, SAME, NOISY, FAILED, FIXED, UNTIMED, ADDED, REMOVED, INCOMPARABLE)

DEFAULT_SAME = 0.03          # |ratio - 1| within this is SAME
DEFAULT_FLOOR_US = 0.1       # medians this close are SAME whatever the ratio (timer resolution)
DEFAULT_THRESHOLD = 0.05     # SLOWER by more than this is a regression
BASELINES = ("torch", "copy")
PASSED = "passed"


# -- what a row measured --------------------------------------------------------------------------
def family_key(fam: dict) -> tuple[str, str]:
    """A family's identity in a run: its name and precision (fp32 unless the file says)."""
    return fam["family"], fam.get("precision") or "fp32"


def family_label(key: tuple[str, str]) -> str:
    name, precision = key
    return name if precision == "fp32" else f"{name} ({precision})"


def family_sizes(fam: dict) -> dict | None:
    """The family's sizes (a `run --json` file records them on the version only)."""
    if fam.get("sizes"):
        return dict(fam["sizes"])
    return next((dict(v["sizes"]) for v in fam.get("versions", []) if v.get("sizes")), None)


def best_timing(row: dict) -> tuple[dict | None, Any]:
    """(the best configuration's timing, its block size) of a version or baseline row."""
    if row.get("best"):
        return row["best"], row.get("best_block_size")
    timings = row.get("timings") or {}
    if timings:
        bs = min(timings, key=lambda b: timings[b].get("median_us", math.inf))
        return timings[bs], None if bs in ("None", "null") else int(bs)
    return row.get("timing"), None


def side(row: dict | None) -> dict | None:
    """What one run says about a row, reduced to what the comparison needs."""
    if row is None:
        return None
    timing, block = best_timing(row)
    out = {"status": row.get("status", "?"), "reason": row.get("reason"), "block_size": block,
           "median_us": None, "p20_us": None, "p80_us": None}
    if timing and timing.get("median_us"):
        med = float(timing["median_us"])
        out.update(median_us=med, p20_us=float(timing.get("p20_us", med)), p80_us=float(timing.get("p80_us", med)))
    return out


def rows_of(fam: dict) -> dict[str, dict]:
    """A family's rows by name: each version by its number, then "torch" and "copy" when run
    (a baseline that could not run here, e.g. no torch installed, is not a row)."""
    rows = {str(v.get("version")): v for v in sorted(fam.get("versions", []), key=lambda v: v.get("version", 0))}
    for name in BASELINES:
        row = fam.get(name)
        if isinstance(row, dict) and row.get("status") not in (None, "unavailable"):
            rows[name] = row
    return rows


# -- the verdict ----------------------------------------------------------------------------------
def classify(old: dict, new: dict, same: float = DEFAULT_SAME,
             floor_us: float = DEFAULT_FLOOR_US) -> tuple[str, float | None]:
    """(verdict, ratio) for one row from its two sides (see `side`); the module docstring has the rule."""
    old_ok, new_ok = old["status"] == PASSED, new["status"] == PASSED
    if old_ok and not new_ok:
        return FAILED, None
    if new_ok and not old_ok:
        return FIXED, None
    if not (old_ok and old["median_us"] and new["median_us"]):
        return UNTIMED, None
    ratio = new["median_us"] / old["median_us"]
    if abs(ratio - 1) <= same or abs(new["median_us"] - old["median_us"]) <= floor_us:
        return SAME, ratio
    if new["p80_us"] < old["p20_us"]:
        return FASTER, ratio
    if new["p20_us"] > old["p80_us"]:
        return SLOWER, ratio
    return NOISY, ratio


def _row_note(verdict: str, old: dict | None, new: dict | None) -> str | None:
    if verdict == FAILED:
        reason = (new.get("reason") or "").strip().splitlines()
        return f"{new['status']}: {reason[0][:100]}" if reason else new["status"]
    if old and new and old["status"] == PASSED and new["status"] == PASSED and old["block_size"] != new["block_size"]:
        return f"block size {old['block_size'] or '-'} -> {new['block_size'] or '-'}"
    return None


def compare_family(key: tuple[str, str], old_fam: dict | None, new_fam: dict | None, same: float = DEFAULT_SAME,
                   floor_us: float = DEFAULT_FLOOR_US) -> dict:
    """One family's rows, judged; `notes` says why a family was not compared, or what moved."""
    label = family_label(key)
    out = {"family": key[0], "precision": key[1], "label": label, "comparable": True, "notes": [], "rows": []}
    old_rows = rows_of(old_fam) if old_fam else {}
    new_rows = rows_of(new_fam) if new_fam else {}
    if old_fam and new_fam:
        old_sizes, new_sizes = family_sizes(old_fam), family_sizes(new_fam)
        if old_sizes and new_sizes and old_sizes != new_sizes:
            out["comparable"] = False
            out["notes"].append(f"{label}: sizes differ ({_fmt_sizes(old_sizes)} in OLD, {_fmt_sizes(new_sizes)} "
                                f"in NEW): its rows are not comparable and were not judged")
    names = list(old_rows) + [n for n in new_rows if n not in old_rows]
    names.sort(key=lambda n: (n in BASELINES, BASELINES.index(n) if n in BASELINES else int(n) if n.isdigit() else 0))
    for name in names:
        old, new = side(old_rows.get(name)), side(new_rows.get(name))
        ratio = None
        if old is None:
            verdict = ADDED
        elif new is None:
            verdict = REMOVED
        elif not out["comparable"]:
            verdict = INCOMPARABLE
        else:
            verdict, ratio = classify(old, new, same, floor_us)
        source = new_rows.get(name) or old_rows.get(name)
        out["rows"].append({"family": key[0], "precision": key[1], "label": label, "row": name,
                            "kind": "baseline" if name in BASELINES else "version",
                            "title": source.get("title") or source.get("expression") or "",
                            "verdict": verdict, "ratio": ratio, "old": old, "new": new,
                            "note": _row_note(verdict, old, new)})
    copy = next((r for r in out["rows"] if r["row"] == "copy"), None)
    if copy and copy["verdict"] in (FASTER, SLOWER):
        out["notes"].append(f"{label}: the copy of the same bytes moved too ({copy['ratio']:.2f}x, "
                            f"{copy['verdict']}): the machine differs between the runs, not only the code")
    return out


def _fmt_sizes(sizes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in sizes.items())


def run_notes(old: dict, new: dict) -> list[str]:
    """Differences between the two runs that make every verdict mean something else."""
    notes = []
    od, nd = old.get("device") or {}, new.get("device") or {}
    if od.get("name") and nd.get("name") and (od.get("name"), od.get("compute_capability")) != (
            nd.get("name"), nd.get("compute_capability")):
        notes.append(f"different devices: OLD ran on {od['name']}, NEW on {nd['name']}: every verdict measures "
                     f"the device as well as the change")
    of, nf = (old.get("options") or {}).get("flush"), (new.get("options") or {}).get("flush")
    if of is not None and nf is not None and of != nf:
        notes.append(f"the L2 flush was {'on' if of else 'off'} in OLD and {'on' if nf else 'off'} in NEW: "
                     f"times with and without it are not comparable")
    return notes


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summarize(rows: list[dict]) -> dict:
    """Counts per verdict (in VERDICTS order) and the geometric-mean ratio of the version rows."""
    counts = {v: n for v in VERDICTS if (n := sum(r["verdict"] == v for r in rows))}
    ratios = [r["ratio"] for r in rows if r["kind"] == "version" and r["ratio"] is not None]
    return {"rows": len(rows), "counts": counts, "geomean": geomean(ratios), "timed": len(ratios)}


def compare_runs(old: dict, new: dict, same: float = DEFAULT_SAME, floor_us: float = DEFAULT_FLOOR_US,
                 old_name: str = "OLD", new_name: str = "NEW") -> dict:
    """Compare two results payloads; a plain, JSON-ready dict (see the module docstring)."""
    check_payload(old, old_name)
    check_payload(new, new_name)
    if not 0 <= same < 1:
        raise UsageError(f"--same must be a fraction in [0, 1), got {same}")
    old_fams = {family_key(f): f for f in old["families"]}
    new_fams = {family_key(f): f for f in new["families"]}
    keys = list(old_fams) + [k for k in new_fams if k not in old_fams]
    families = [compare_family(k, old_fams.get(k), new_fams.get(k), same, floor_us) for k in keys]
    rows = [r for f in families for r in f["rows"]]
    return {"old": _run_meta(old, old_name), "new": _run_meta(new, new_name), "same": same, "floor_us": floor_us,
            "notes": run_notes(old, new) + [n for f in families for n in f["notes"]],
            "families": families, "summary": summarize(rows)}


def _run_meta(payload: dict, name: str) -> dict:
    return {"name": name, "device": (payload.get("device") or {}).get("name"),
            "date": payload.get("date"), "commit": payload.get("commit")}


def compare_files(old_path: str | os.PathLike, new_path: str | os.PathLike, **kwargs) -> dict:
    """`compare_runs` on two files, named by their paths; a note when they are one file."""
    comparison = compare_runs(read_payload(old_path), read_payload(new_path),
                              old_name=str(old_path), new_name=str(new_path), **kwargs)
    if os.path.samefile(old_path, new_path):
        comparison["notes"].insert(0, f"OLD and NEW are the same file ({old_path})")
    return comparison


def all_rows(comparison: dict) -> list[dict]:
    return [r for f in comparison["families"] for r in f["rows"]]


def regressions(comparison: dict, threshold: float = DEFAULT_THRESHOLD) -> list[dict]:
    """The version rows that are SLOWER by more than `threshold` or newly FAILED (the CI gate)."""
    return [r for r in all_rows(comparison) if r["kind"] == "version" and (
        r["verdict"] == FAILED or (r["verdict"] == SLOWER and r["ratio"] > 1 + threshold))]


class Regressed(WorkbenchError):
    """NEW is slower than OLD beyond the threshold, or a version newly fails."""

    exit_code = 4


def describe(row: dict) -> str:
    """`layernorm_forward 6 SLOWER 1.30x` / `softmax_forward 3 FAILED (crashed)`: a row on one line."""
    what = f"{row['label']} {row['row']} {row['verdict']}"
    if row["ratio"] is not None:
        return f"{what} {row['ratio']:.2f}x"
    return f"{what} ({row['new']['status']})" if row["verdict"] == FAILED else what


def check_regressions(comparison: dict, threshold: float = DEFAULT_THRESHOLD) -> None:
    """Raise `Regressed` (exit code 4), naming the rows in one line, if there are regressions."""
    bad = regressions(comparison, threshold)
    if bad:
        shown = ", ".join(describe(r) for r in bad[:5]) + (f", and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise Regressed(f"{len(bad)} regression(s) beyond {100 * threshold:g}%: {shown}")


# -- rendering ---------------------------------------------------------------------------------------
VERDICT_STYLE = {FASTER: "bold green", SLOWER: "bold red", SAME: "dim", NOISY: "yellow", FAILED: "bold red",
                 FIXED: "green", UNTIMED: "dim", ADDED: "cyan", REMOVED: "magenta", INCOMPARABLE: "yellow"}


def _side_cell(s: dict | None) -> Text:
    """A run's figure for a row: its median and half its p20-p80 band as a share, or its status."""
    if s is None:
        return Text("-", style="dim")
    if s["status"] != PASSED:
        return Text(s["status"], style="red")
    if s["median_us"] is None:
        return Text("untimed", style="dim")
    spread = 50 * (s["p80_us"] - s["p20_us"]) / s["median_us"]
    return Text.assemble(fmt_us(s["median_us"]), (f" ±{spread:.1f}%", "dim"))


def _ratio_cell(row: dict) -> Text:
    ratio = row["ratio"]
    if ratio is None:
        return Text("")
    return Text(f"{ratio:.2f}x", style=VERDICT_STYLE[row["verdict"]] if row["verdict"] != SAME else "")


def comparison_table(comparison: dict) -> Table:
    """One table: family, row, OLD and NEW medians (± half the p20-p80 band), ratio, verdict, note."""
    old, new = comparison["old"], comparison["new"]
    table = Table(title=f"{new['name']} against {old['name']} (ratio = new / old; SAME within "
                        f"{100 * comparison['same']:g}%)", title_justify="left")
    for col, justify in (("family", "left"), ("row", "right"), ("old", "right"), ("new", "right"),
                         ("ratio", "right"), ("verdict", "left"), ("note", "left")):
        table.add_column(col, justify=justify, overflow="fold")
    for fam in comparison["families"]:
        verdicts = {r["verdict"] for r in fam["rows"]}
        if len(verdicts) == 1 and verdicts <= {ADDED, REMOVED}:  # a family in one run only: one line
            verdict = next(iter(verdicts))
            table.add_row(Text(fam["label"], style="bold"), Text("all"), Text(""), Text(""), Text(""),
                          Text(verdict, style=VERDICT_STYLE[verdict]),
                          Text(f"only in {'NEW' if verdict == ADDED else 'OLD'} ({_count(len(fam['rows']), 'row')})"))
        else:
            for i, row in enumerate(fam["rows"]):
                table.add_row(Text(fam["label"] if i == 0 else "", style="bold"), Text(row["row"]),
                              _side_cell(row["old"]), _side_cell(row["new"]), _ratio_cell(row),
                              Text(row["verdict"], style=VERDICT_STYLE[row["verdict"]]), Text(row["note"] or ""))
        table.add_section()
    return table


def summary_line(comparison: dict) -> Text:
    """`110 rows: 101 SAME, 5 FASTER, ...; geometric mean new/old over 84 versions 0.97x (3.1% faster)`."""
    s = comparison["summary"]
    text = Text(f"{s['rows']} rows: ")
    for i, (verdict, n) in enumerate(s["counts"].items()):
        text.append(", " if i else "")
        text.append(f"{n} {verdict}", style=VERDICT_STYLE[verdict])
    g = s["geomean"]
    if g is not None:
        change = ("unchanged" if abs(g - 1) < 5e-4 else
                  f"{100 * (1 - g):.1f}% faster" if g < 1 else f"{100 * (g - 1):.1f}% slower")
        text.append(f"; geometric mean new/old over {_count(s['timed'], 'version')} timed in both: {g:.3f}x ({change})")
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def notes_text(comparison: dict) -> list[Text]:
    return [Text(f"note: {n}", style="yellow") for n in comparison["notes"]]


def regressions_line(comparison: dict, threshold: float = DEFAULT_THRESHOLD) -> Text:
    bad = regressions(comparison, threshold)
    if not bad:
        return Text(f"no regressions beyond {100 * threshold:g}%", style="green")
    return Text(f"{len(bad)} regression(s) beyond {100 * threshold:g}%: " + ", ".join(describe(r) for r in bad),
                style="bold red")


def comparison_report(comparison: dict, threshold: float = DEFAULT_THRESHOLD) -> Group:
    """All of it, for `workbench compare`: the table, the notes, the summary and the regressions."""
    return Group(comparison_table(comparison), *notes_text(comparison), summary_line(comparison),
                 regressions_line(comparison, threshold))
