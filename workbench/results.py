"""Results: what checking and timing found, as typed records, and the JSON file that holds them.

A bench is a tree of three records:

* `BenchRun`: the device, its measured copy ceiling, the options, where the time went, and
* `FamilyResult` per family: the sizes, the bytes that must move (and FLOPs), and its
* `Row`s: one per version, plus the baselines (PyTorch, a plain copy of the same bytes). Every
  row comes from the same code path in the worker (see providers.py), so it has the same fields:
  a status, what the checks found (`CheckSummary`, and the first failures in detail) and one
  `Measured` per configuration (block size) timed.

Block sizes are ints, or None for a row with nothing to sweep, end to end; only the JSON spells
them as strings (JSON object keys). The JSON is the format results/h100-bench.json was written
in, and every file written in it since keeps loading: `load` reads both.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import textwrap
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable

from .errors import UsageError
from .files import write_text_atomic

FORMAT = 1
OK = "passed"
# Statuses that are not a defect of the row: a version refused at these sizes, a baseline that
# cannot run here (no torch).
NOT_FAILURES = ("passed", "refused", "unavailable")


@dataclass
class Timing:
    """Samples of one configuration, in microseconds: the median and the 20th-80th percentile
    band (the spread), how many samples, and how the L2 drain was charged (timing.py)."""

    median_us: float
    p20_us: float
    p80_us: float
    reps: int
    noise: float              # (p80 - p20) / median
    drain_us: float = 0.0     # the drain's own time, already subtracted
    drained: bool = True      # False: too short to resolve with the drain; timed flushed, undrained
    ci: float | None = None   # half-width of the median's 95% confidence interval / median (timing.median_ci)

    @classmethod
    def from_json(cls, d: dict) -> "Timing":
        return cls(**{k: d[k] for k in ("median_us", "p20_us", "p80_us", "reps", "noise") if k in d},
                   drain_us=d.get("drain_us", 0.0), drained=d.get("drained", True),
                   ci=d.get("ci"))

    def to_json(self) -> dict:
        out = asdict(self)
        if out["ci"] is None:  # files written before the interval was kept read back unchanged
            del out["ci"]
        return out


@dataclass
class Measured:
    """One configuration's timing with what it means: bandwidth against the bytes the op must
    move, its share of the measured copy ceiling, and TFLOP/s for families that count FLOPs."""

    block_size: int | None
    timing: Timing
    gbps: float
    pct_ceiling: float
    tflops: float | None = None

    @classmethod
    def of(cls, block_size: int | None, timing: Timing, nbytes: int, flops: int | None,
           ceiling_gbps: float) -> "Measured":
        seconds = max(timing.median_us, 1e-3) * 1e-6  # a timer tick at least: never divide by zero
        gbps = nbytes / seconds / 1e9
        return cls(block_size, timing, gbps, 100.0 * gbps / ceiling_gbps,
                   flops / seconds / 1e12 if flops else None)

    @property
    def median_us(self) -> float:
        return self.timing.median_us

    def to_json(self) -> dict:
        out = {**self.timing.to_json(), "gbps": self.gbps, "pct_ceiling": self.pct_ceiling}
        if self.tflops is not None:
            out["tflops"] = self.tflops
        return out

    @classmethod
    def from_json(cls, block_size: int | None, d: dict) -> "Measured":
        return cls(block_size, Timing.from_json(d), d.get("gbps", 0.0), d.get("pct_ceiling", 0.0), d.get("tflops"))


@dataclass
class CheckSummary:
    """What the checks covered: how many launches were compared, at which sizes, seeds and block
    sizes, the largest errors seen, and whether the row was checked again after timing."""

    count: int = 0
    sizes: list[dict] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    block_sizes: list[int | None] = field(default_factory=list)
    max_abs: float = 0.0
    max_rel: float = 0.0
    after_timing: bool = False

    def add(self, sizes: dict, seed: int, block_size: int | None, when: str, max_abs: float, max_rel: float) -> None:
        self.count += 1
        if sizes not in self.sizes:
            self.sizes.append(dict(sizes))
        if seed not in self.seeds:
            self.seeds.append(seed)
            self.seeds.sort()
        if block_size not in self.block_sizes:
            self.block_sizes.append(block_size)
            self.block_sizes.sort(key=lambda b: -1 if b is None else b)
        self.after_timing |= when == "after timing"
        if not math.isnan(max_abs):
            self.max_abs = max(self.max_abs, max_abs)
            self.max_rel = max(self.max_rel, max_rel)

    @classmethod
    def from_json(cls, d: dict | None) -> "CheckSummary | None":
        if not d or "count" not in d:
            return None
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


def _bs_key(text: str) -> int | None:
    return None if text in ("None", "null", "-") else int(text)


@dataclass
class Row:
    """One row of a table: a version of the family, or a baseline ("torch", "copy")."""

    kind: str                          # "version" | "torch" | "copy"
    family: str
    version: int | None = None         # the version's number; None for a baseline
    title: str = ""
    status: str = "started"
    reason: str | None = None
    phase: str | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    check: CheckSummary | None = None
    failures: list[dict] = field(default_factory=list)    # the first failing checks, in detail
    timings: dict[int | None, Measured] = field(default_factory=dict)
    unusable_block_sizes: dict[int | None, str] = field(default_factory=dict)
    skipped_sizes: list[dict] = field(default_factory=list)
    resources: dict[str, dict] = field(default_factory=dict)
    launches: list[str] = field(default_factory=list)
    compiler_warnings: str = ""
    expression: str | None = None      # torch: the contract's expression
    library_version: str | None = None  # torch: its version
    seconds: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # seconds by phase: setup, check, time, re-check
    stderr: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of older files, kept on a round trip

    @property
    def label(self) -> str:
        return f"{self.family} {self.version}" if self.kind == "version" else f"{self.family} {self.kind}"

    @property
    def passed(self) -> bool:
        return self.status == OK

    @property
    def best(self) -> Measured | None:
        if not self.timings:
            return None
        return min(self.timings.values(), key=lambda m: m.median_us)

    @property
    def best_block_size(self) -> int | None:
        best = self.best
        return best.block_size if best else None

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict:
        out: dict[str, Any] = dict(self.extra)
        out["status"] = self.status
        for key in ("reason", "phase", "seconds", "stderr"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.phases:
            out["phases"] = {k: round(v, 3) for k, v in self.phases.items()}
        if self.kind != "version":
            out["kind"] = self.kind
            if self.check is not None:
                out["check"] = asdict(self.check)
            if self.failures:
                out["failures"] = self.failures
            if self.expression:
                out["expression"] = self.expression
            if self.library_version:
                out["torch"] = self.library_version
            best = self.best
            if best is not None:
                out["timing"] = best.timing.to_json()
                out["gbps"], out["pct_ceiling"] = best.gbps, best.pct_ceiling
                if best.tflops is not None:
                    out["tflops"] = best.tflops
            return out
        out.update(family=self.family, version=self.version, title=self.title, sizes=self.sizes)
        if self.check is not None:
            out["check"] = asdict(self.check)
        out["failures"] = self.failures
        for key in ("resources", "launches", "compiler_warnings", "skipped_sizes"):
            value = getattr(self, key)
            if value:
                out[key] = value
        out["unusable_block_sizes"] = {str(k): v for k, v in self.unusable_block_sizes.items()}
        if self.timings:
            out["timings"] = {str(bs): m.to_json() for bs, m in self.timings.items()}
            out["best_block_size"] = self.best_block_size
            out["best"] = self.best.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict, family: str = "", kind: str | None = None) -> "Row":
        kind = kind or d.get("kind", "version")
        known = {"status", "reason", "phase", "seconds", "stderr", "kind", "family", "version", "title",
                 "sizes", "check", "failures", "resources", "launches", "compiler_warnings", "skipped_sizes",
                 "unusable_block_sizes", "timings", "best_block_size", "best", "timing", "gbps", "pct_ceiling",
                 "tflops", "expression", "torch", "speedup_vs_first", "speedup_vs_torch", "phases"}
        row = cls(kind=kind, family=d.get("family", family), version=d.get("version") if kind == "version" else None,
                  title=d.get("title", ""), status=d.get("status", "started"), reason=d.get("reason"),
                  phase=d.get("phase"), sizes=dict(d.get("sizes") or {}), failures=list(d.get("failures") or []),
                  resources=dict(d.get("resources") or {}), launches=list(d.get("launches") or []),
                  compiler_warnings=d.get("compiler_warnings") or "", skipped_sizes=list(d.get("skipped_sizes") or []),
                  expression=d.get("expression"), library_version=d.get("torch") if isinstance(d.get("torch"), str) else None,
                  seconds=d.get("seconds"), stderr=d.get("stderr"),
                  phases={k: float(v) for k, v in (d.get("phases") or {}).items() if isinstance(v, (int, float))},
                  extra={k: v for k, v in d.items() if k not in known})
        check = d.get("check")
        row.check = CheckSummary.from_json(check) if isinstance(check, dict) else None
        if kind != "version" and isinstance(check, dict) and row.check is None:
            row.extra["check"] = check  # an older baseline's per-output errors
        row.unusable_block_sizes = {_bs_key(k): v for k, v in (d.get("unusable_block_sizes") or {}).items()}
        if d.get("timings"):
            row.timings = {_bs_key(k): Measured.from_json(_bs_key(k), t) for k, t in d["timings"].items()}
        elif d.get("timing"):
            row.timings = {None: Measured(None, Timing.from_json(d["timing"]), d.get("gbps", 0.0),
                                          d.get("pct_ceiling", 0.0), d.get("tflops"))}
        return row


@dataclass
class FamilyResult:
    """Every row of one family at one size set."""

    family: str
    title: str
    sizes: dict[str, int]
    bytes: int
    flops: int | None = None
    precision: str = "fp32"   # a family's versions are benched per precision: bytes differ
    versions: list[Row] = field(default_factory=list)
    torch: Row | None = None
    copy: Row | None = None
    seconds: float | None = None
    # bench: the versions are done, the baselines not yet (Finishing holds them back); such a
    # family is in the --json so that nothing measured is lost, and --resume runs it again
    baselines_pending: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.family, self.precision

    @property
    def label(self) -> str:
        return self.family if self.precision == "fp32" else f"{self.family} ({self.precision})"

    def rows(self) -> list[Row]:
        return [*self.versions, *(r for r in (self.torch, self.copy) if r is not None)]

    def version(self, number: int) -> Row | None:
        return next((r for r in self.versions if r.version == number), None)

    @property
    def best_version(self) -> Row | None:
        timed = [r for r in self.versions if r.passed and r.best]
        return min(timed, key=lambda r: r.best.median_us) if timed else None

    def speedup_vs_first(self, row: Row) -> float | None:
        first = min((r for r in self.versions), key=lambda r: r.version, default=None)
        if first is None or not (first.passed and first.best and row.best):
            return None
        return first.best.median_us / row.best.median_us

    def speedup_vs_torch(self, row: Row) -> float | None:
        if not (self.torch and self.torch.passed and self.torch.best and row.best):
            return None
        return self.torch.best.median_us / row.best.median_us

    def failures(self) -> list[Row]:
        return [r for r in self.versions if r.status not in NOT_FAILURES]

    def to_json(self) -> dict:
        versions = []
        for row in self.versions:
            d = row.to_json()
            for key, value in (("speedup_vs_first", self.speedup_vs_first(row)),
                               ("speedup_vs_torch", self.speedup_vs_torch(row))):
                if value is not None and row.passed:
                    d[key] = value
            versions.append(d)
        best = self.best_version
        extra = {"precision": self.precision} if self.precision != "fp32" else {}
        return {"family": self.family, **extra, "title": self.title, "sizes": self.sizes, "bytes": self.bytes,
                "flops": self.flops, "seconds": self.seconds, "versions": versions,
                "torch": self.torch.to_json() if self.torch else None,
                "copy": self.copy.to_json() if self.copy else None,
                "best_version": best.version if best else None,
                **({"baselines": "pending"} if self.baselines_pending else {})}

    @classmethod
    def from_json(cls, d: dict) -> "FamilyResult":
        name = d.get("family", "")
        return cls(family=name, title=d.get("title", ""), sizes=dict(d.get("sizes") or {}),
                   bytes=int(d.get("bytes") or 0), flops=d.get("flops"), seconds=d.get("seconds"),
                   precision=d.get("precision", "fp32"),
                   versions=[Row.from_json(v, name, "version") for v in d.get("versions", [])],
                   torch=Row.from_json(d["torch"], name, "torch") if d.get("torch") else None,
                   copy=Row.from_json(d["copy"], name, "copy") if d.get("copy") else None,
                   baselines_pending=d.get("baselines") == "pending")


@dataclass
class BenchRun:
    """A whole run: where it ran, how, and every family's rows."""

    device: dict
    ceiling: dict
    date: str | None = None
    commit: str | None = None
    options: dict = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)   # measured matmul TFLOP/s, when known
    # Inside "versions" and "baselines" of `seconds`: the rows' own phases summed (setup: start,
    # compile or load, open the cases; check; time; re-check). The rest is process start and waits.
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    families: list[FamilyResult] = field(default_factory=list)

    def family(self, name: str, precision: str = "fp32") -> FamilyResult | None:
        return next((f for f in self.families if f.key == (name, precision)), None)

    def put(self, fam: FamilyResult) -> None:
        """Add a family's result, replacing an earlier one of the same family and precision."""
        self.families = [f for f in self.families if f.key != fam.key] + [fam]

    @property
    def meta(self) -> dict:
        return {"device": self.device, "ceiling": self.ceiling}

    def to_json(self) -> dict:
        out = {"workbench": FORMAT, "device": self.device, "ceiling": self.ceiling, "date": self.date,
               "commit": self.commit, "options": self.options, "seconds": self.seconds}
        if self.peaks:
            out["peaks"] = self.peaks
        if self.phases:
            out["phases"] = self.phases
        out["families"] = [f.to_json() for f in self.families]
        return out

    @classmethod
    def from_json(cls, d: dict) -> "BenchRun":
        return cls(device=d.get("device") or {}, ceiling=d.get("ceiling") or {}, date=d.get("date"),
                   commit=d.get("commit"), options=d.get("options") or {}, seconds=d.get("seconds") or {},
                   peaks=d.get("peaks") or {}, phases=d.get("phases") or {}, families=[FamilyResult.from_json(f) for f in d.get("families", [])])


EXPECTED_FILE = "expected a results file from `workbench bench --json` or `workbench run --json`"


def check_payload(payload: Any, where: str = "results") -> dict:
    """`payload` itself if it is a workbench results payload; else a one-line UsageError."""
    if not isinstance(payload, dict) or "workbench" not in payload:
        raise UsageError(f"{where}: not a workbench results file ({EXPECTED_FILE})")
    fmt = payload["workbench"]
    if not isinstance(fmt, int) or isinstance(fmt, bool) or fmt < 1:
        raise UsageError(f"{where}: unknown results format {fmt!r} ({EXPECTED_FILE})")
    families = payload.get("families")
    if not isinstance(families, list) or not all(
            isinstance(f, dict) and isinstance(f.get("family"), str) and isinstance(f.get("versions", []), list)
            for f in families):
        raise UsageError(f"{where}: a results file needs a \"families\" list of "
                             f"{{\"family\": ..., \"versions\": [...]}} ({EXPECTED_FILE})")
    return payload


def read_payload(path: str | os.PathLike) -> dict:
    """Read a results file (gzipped where its name ends in .gz: the repository keeps its older bench
    runs so); a one-line UsageError if it is missing, unreadable or not one."""
    path = Path(path)
    try:
        text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file ({EXPECTED_FILE})") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder ({EXPECTED_FILE})") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:  # gzip.BadGzipFile is an OSError
        raise UsageError(f"{path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    try:
        payload = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e}); {EXPECTED_FILE}") from None
    return check_payload(payload, str(path))


def load(path: str | os.PathLike) -> BenchRun:
    """Read a results file written by `bench --json` or `run --json`; one clear line if it is not one."""
    return BenchRun.from_json(read_payload(path))


def check_resume(path: str | os.PathLike | None, resume: bool) -> None:
    """Before any GPU work: the file `bench --resume` continues, if it exists, is a results file
    (a one-line UsageError if not)."""
    if resume and path and Path(path).exists():
        load(path)


def json_text(payload: dict) -> str:
    """A results file's text: indented by one space, what JSON cannot say as a string."""
    return json.dumps(payload, indent=1, default=str)


def write_json(path: str | os.PathLike, payload: dict) -> None:
    """Write atomically: a crash mid-write never leaves half a results file."""
    write_text_atomic(path, json_text(payload))


def save(path: str | os.PathLike, run: BenchRun) -> None:
    write_json(path, run.to_json())


class RunFile:
    """A bench's --json, written again after each family: the same text as save(), but each
    family is turned into text once (a bench puts a family when it is done, and a family put again
    is a new object), except one whose baselines are pending, which changes once they are done.
    Rewriting the whole run each time took ~0.1 s a family by the end of a bench --all (json's
    indented encoder is pure Python), 3-4 s of the bench."""

    def __init__(self, path: str | os.PathLike):
        self.path = path
        self._texts: dict[int, tuple[FamilyResult, str]] = {}  # id -> (the object, kept alive; its text)

    def _text(self, fam: FamilyResult) -> str:
        if id(fam) in self._texts:
            return self._texts[id(fam)][1]
        text = textwrap.indent(json_text(fam.to_json()), "  ")
        if not fam.baselines_pending:
            self._texts[id(fam)] = (fam, text)
        return text

    def save(self, run: BenchRun) -> None:
        text = json_text(replace(run, families=[]).to_json())
        if run.families:
            assert text.endswith('"families": []\n}')
            text = text[:-len("[]\n}")] + "[\n" + ",\n".join(self._text(f) for f in run.families) + "\n ]\n}"
        write_text_atomic(self.path, text)


def rows_of(families: Iterable[FamilyResult]) -> Iterable[Row]:
    for fam in families:
        yield from fam.rows()
