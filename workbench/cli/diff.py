"""Diff: two versions of a family side by side, for a reader walking the course.

`workbench diff FAMILY A B` (or `FAMILY B`: A is then the version B builds on) prints each version's
story (its header, as `workbench show` presents it), then a unified diff of the two files (the whole
text: the header's TOML and the code), each line numbered on both sides, then the local headers
either version includes (`#include "..."` from the family's folder or kernels/common/, directly or
through another header): the same text is listed as "same", one only a version includes as such, a
changed one is diffed the same way.
`--stat` prints only the counts, as `git diff --stat` does.

Lines are never wrapped or cut at the terminal's width (a version's prose and long code lines stay
whole): page with `less -RS`. Colour goes when the output is not a terminal, or with --no-color.
The counts are difflib's (the same matcher as `difflib.unified_diff`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from .. import report
from ..compile import INCLUDE, include_dirs
from ..errors import WorkbenchError
from ..family import Project, Version
from .app import console


class NothingToCompare(WorkbenchError):
    """The same version named twice."""

    exit_code = 2


@dataclass(frozen=True)
class Helper:
    """A local header a version includes: the name in its #include, the file, and the header that
    includes it when the version does not itself."""

    name: str
    path: Path
    via: str | None = None


def helpers(path: Path) -> dict[str, Helper]:
    """The local headers the file at `path` includes, directly or through one another, in the
    order met. Resolved as nvcc resolves them for a version (compile.include_dirs: the version's
    folder, then kernels/common/); a name found in neither (a system header in quotes) is skipped."""
    dirs = [Path(d) for d in include_dirs(path)]
    found: dict[str, Helper] = {}

    def walk(text: str, via: str | None) -> None:
        for name in INCLUDE.findall(text):
            if name in found:
                continue
            for d in dirs:
                if (d / name).is_file():
                    found[name] = Helper(name, d / name, via)
                    walk((d / name).read_text(), name)
                    break

    walk(Path(path).read_text(), None)
    return found


@dataclass
class FileDiff:
    """Two texts of one file (or of the two versions' files); a side is None when absent."""

    a_path: Path | None
    b_path: Path | None
    a_lines: list[str] = field(default_factory=list)
    b_lines: list[str] = field(default_factory=list)
    via: str | None = None  # a helper: the header that includes it, when no version does itself

    @classmethod
    def of(cls, a: Path | None, b: Path | None, via: str | None = None) -> "FileDiff":
        return cls(a, b, a.read_text().splitlines() if a else [], b.read_text().splitlines() if b else [], via)

    @property
    def status(self) -> str:
        """'only A', 'only B', 'same' or 'changed'."""
        if self.b_path is None:
            return "only A"
        if self.a_path is None:
            return "only B"
        return "same" if self.a_lines == self.b_lines else "changed"

    def opcodes(self, context: int = 3) -> list[list[tuple[str, int, int, int, int]]]:
        """The hunks: difflib's grouped opcodes with `context` lines around each change."""
        if self.a_lines == self.b_lines:
            return []
        return list(difflib.SequenceMatcher(None, self.a_lines, self.b_lines).get_grouped_opcodes(context))

    def counts(self) -> tuple[int, int]:
        """(lines added, lines removed): the '+' and '-' lines of the unified diff."""
        added = removed = 0
        for group in self.opcodes(0):
            for tag, i1, i2, j1, j2 in group:
                if tag in ("replace", "delete"):
                    removed += i2 - i1
                if tag in ("replace", "insert"):
                    added += j2 - j1
        return added, removed


@dataclass
class Comparison:
    a: Version
    b: Version
    source: FileDiff
    helpers: dict[str, FileDiff]  # by the name in the #include, A's first, then those only B has

    def rel(self, path: Path | None) -> str:
        root = self.a.family.project.root
        if path is None:
            return "-"
        try:
            return str(path.relative_to(root))
        except ValueError:
            return str(path)


def compare(project: Project, family: str, a: str, b: str | None = None) -> Comparison:
    """The two versions' files and their helpers; one-line errors for an unknown family or version
    (naming what exists) and for a version compared with itself. Without `b`, `a` is compared
    with the version it builds on (its header's builds_on)."""
    fam = project.family(family)
    if b is None:
        vb = fam.version(a)
        if not vb.builds_on:
            raise NothingToCompare(f"{vb.label} builds on no earlier version (no builds_on in its header): "
                                   f"name the two versions to compare")
        va = fam.version(vb.builds_on)
    else:
        va, vb = fam.version(a), fam.version(b)
    if va.number == vb.number:
        raise NothingToCompare(f"nothing to compare: version {va.number} with itself")
    ha, hb = helpers(va.path), helpers(vb.path)
    return Comparison(va, vb, FileDiff.of(va.path, vb.path), {
        name: FileDiff.of(ha[name].path if name in ha else None, hb[name].path if name in hb else None,
                          (ha.get(name) or hb[name]).via)
        for name in [*ha, *(n for n in hb if n not in ha)]})


# -- rendering: rich Text, one line per diff line, never wrapped -------------------------------------
STYLE = {"+": "green", "-": "red", " ": "", "@": "cyan"}


def _range(start: int, stop: int) -> str:
    """A side's range in a hunk header, as difflib.unified_diff writes it."""
    length = stop - start
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def diff_lines(d: FileDiff, a_label: str, b_label: str, context: int = 3) -> list[Text]:
    """A unified diff: the two file lines, then each hunk's @@ line and its lines, each numbered
    on A's side and on B's (blank on the side it is not on)."""
    width = len(str(max(len(d.a_lines), len(d.b_lines), 1)))
    out = [Text(f"--- {a_label}", style="bold red"), Text(f"+++ {b_label}", style="bold green")]
    blank = " " * width

    def line(sign: str, i: int | None, j: int | None, text: str) -> Text:
        return Text.assemble((f"{blank if i is None else i + 1:>{width}} {blank if j is None else j + 1:>{width}} ",
                              "dim"), (sign + text, STYLE[sign]))

    for group in d.opcodes(context):
        first, last = group[0], group[-1]
        out.append(Text(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@", style="cyan"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [line(" ", i, j, d.a_lines[i]) for i, j in zip(range(i1, i2), range(j1, j2))]
                continue
            out += [line("-", i, None, d.a_lines[i]) for i in range(i1, i2)]
            out += [line("+", None, j, d.b_lines[j]) for j in range(j1, j2)]
    return out


def story(v: Version, side: str) -> list:
    """A version's title on a line of its own (never cut), then its header as `show` presents it."""
    panel = report.version_panel(v)
    panel.title = None
    head = Text.assemble((f"{side}  ", "bold red" if side == "A" else "bold green"), (f"{v.label}: ", "bold"), v.title)
    return [head, panel]


def helper_lines(c: Comparison, context: int = 3) -> list[Text]:
    """The helpers: 'same' and 'only in' as a line each, a changed one as a diff."""
    if not c.helpers:
        return [Text("neither version includes a local header (kernels/common/ or the family's folder)", style="dim")]
    out: list[Text] = []
    for name, d in c.helpers.items():
        via = f"  (through {d.via})" if d.via else ""
        if d.status == "same":
            out.append(Text.assemble(("  same       ", "dim"), c.rel(d.a_path), (via, "dim")))
        elif d.status == "only A":
            out.append(Text.assemble(("  only in A  ", "red"), c.rel(d.a_path), (f"  ({c.a.label}){via}", "dim")))
        elif d.status == "only B":
            out.append(Text.assemble(("  only in B  ", "green"), c.rel(d.b_path), (f"  ({c.b.label}){via}", "dim")))
    for name, d in c.helpers.items():
        if d.status == "changed":
            out += [Text(""), *diff_lines(d, f"{c.rel(d.a_path)}  (as {c.a.label} includes it)",
                                          f"{c.rel(d.b_path)}  (as {c.b.label} includes it)", context)]
    return out


def stat_lines(c: Comparison) -> list[Text]:
    """`--stat`: each file's lines added and removed (the helpers: same / only in A or B)."""
    rows = [(f"{c.rel(c.a.path)} -> {c.rel(c.b.path)}", c.source)]
    rows += [(c.rel(d.a_path if d.a_path else d.b_path), d) for d in c.helpers.values()]
    width = max(len(name) for name, _ in rows)
    out, total_added, total_removed = [], 0, 0
    for name, d in rows:
        if d.status in ("only A", "only B"):
            label = c.a.label if d.status == "only A" else c.b.label
            cells = [(f"only in {d.status[-1]} ({label}), {len(d.a_lines or d.b_lines)} lines", "dim")]
        else:
            added, removed = d.counts()
            total_added, total_removed = total_added + added, total_removed + removed
            cells = [(f"+{added}", "green"), " ", (f"-{removed}", "red")] if d.status == "changed" else [("same", "dim")]
        out.append(Text.assemble(f"{name:<{width}}  ", *cells))
    out.append(Text.assemble(f"{'total':<{width}}  ", (f"+{total_added}", "green"), " ", (f"-{total_removed}", "red")))
    return out


@click.command("diff")
@click.argument("family")
@click.argument("a")
@click.argument("b", required=False)
@click.option("--context", "-U", default=3, show_default=True, type=click.IntRange(0),
              help="Lines of context around each change.")
@click.option("--stat", is_flag=True, help="Only the counts: lines added and removed per file.")
@click.option("--no-color", is_flag=True, help="Plain text (also when the output is not a terminal).")
@click.pass_obj
def diff(project: Project, family, a, b, context, stat, no_color):
    """Two versions of a family side by side: each one's story, a numbered unified diff of the two
    files (header and code), then the local headers either includes (same, only in A or B, or
    their diff). Long lines are never cut: page with `less -RS`. Given one version, A is the
    version it builds on (its header's builds_on).

    \b
    workbench diff layernorm_forward 3 4
    workbench diff layernorm_forward 6         (A: the version 6 builds on)
    workbench diff gelu_forward 3 4 --stat
    """
    out = Console(highlight=False, color_system=None) if no_color else console
    c = compare(project, family, a, b)
    if stat:
        out.print(Text("\n").join(stat_lines(c)), soft_wrap=True)
        return
    for renderable in [*story(c.a, "A"), *story(c.b, "B")]:
        out.print(renderable, soft_wrap=isinstance(renderable, Text))
    out.print()
    if c.source.status == "same":
        out.print(Text(f"{c.rel(c.a.path)} and {c.rel(c.b.path)} hold the same text", style="bold"), soft_wrap=True)
    else:
        out.print(Text("\n").join(diff_lines(c.source, f"{c.rel(c.a.path)}  (A: {c.a.label})",
                                             f"{c.rel(c.b.path)}  (B: {c.b.label})", context)), soft_wrap=True)
    out.print()
    out.print(Text("local headers either version includes", style="bold"), soft_wrap=True)
    out.print(Text("\n").join(helper_lines(c, context)), soft_wrap=True)


commands = [diff]
