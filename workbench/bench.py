"""The loops behind `run`, `check` and `bench`: build the reference cases, run each row in a
child process, and gather typed results (results.py), written to JSON as they come.

It prints nothing: callers pass a `progress(text)` callback and render the returned records with
report.py. A `Session` runs the loops (run_version, run_baselines, bench_family, bench, sweep,
check) and wires together the parts that each own one thing:

* `CaseStore` (cases.py): the reference cases on disk, the pool computing them, their disk budget;
* `StagedCases` (staged.py): the case owner child and what it holds on the device;
* `Children` (children.py): the versions' children and the baselines' long-lived child;
* `Compiles` (compiles.py): the background compile pool;
* `Ledger` (ledger.py): where the session's seconds went; `Options` (options.py): what it was
  asked for, one object every part shares.

The order of work in a bench, and why:

* the device is probed once (its copy ceiling is measured once per device and cached);
* every version is compiled in a background process pool, niced, without a GPU context
  (compile.compile_in_pool); each version's row waits only for its own compile;
* every family's reference cases are computed in the background, in the order the GPU will
  want them, the dear ones (AdamW, softmax, the classifier's) in a pool of their own so they
  neither hold every worker at once nor start last; the families are benched in the order their
  cases become ready, so the GPU never waits on one family's references while another's are done;
* per family: each version in a fresh child (isolate.Server with one job per child, the next
  child started ahead so its interpreter and CUDA context are ready; a finished child is kept
  idle and the family's are let go together, their exits overlapping the next family's
  staging, never a timed job), then the baselines
  (PyTorch and a same-size copy) in one long-lived child (torch loads once, then runs each
  family's torch expression once while no job waits: an op's first call can take seconds); until
  that child says it is ready, the first families' baselines are held back and the GPU goes on
  with the next versions; each family's results go to the JSON file as soon as its baselines are
  done (a held family's at once, marked as waiting for them), so a stopped bench keeps all it
  measured and `--resume` skips the families finished there;
* timing: every block size briefly, then the front-runners (within 5% of the best, two at
  most) with the rest of the budget, going on from their screening samples (providers.py).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .baselines import KeptBaselines, baseline_specs  # noqa: F401  (baseline_specs: importable from here)
from .cases import CASE_BUDGET_MIN, CASE_BUDGET_SHARE, CaseStore, build_cases, estimated_case_bytes  # noqa: F401
from .children import LINGER, Children  # noqa: F401
from .compile import arch_of
from .compiles import Compiles
from .device import Probe, probe_device, require_pycuda  # noqa: F401  (the CLI imports them from here)
from .errors import SizesError, UsageError
from .family import PROJECT_ROOT, Family, Project, Version
from .ledger import Ledger, hand_offs  # noqa: F401
from .options import Options, Progress, RowJob, quiet  # noqa: F401
from .results import BenchRun, FamilyResult, Row, RunFile, load
from .staged import StagedCases

# At most this many families benched while their baselines wait for the baselines' child (bench)
HELD_BACK = 12

# Re-exported above (importable from here as before the session was split): the case store's
# build_cases, estimated_case_bytes and budget, the children's LINGER, the ledger's
# hand_offs, Options and Progress.


@dataclass
class Session:
    """One bench session: its loops, over the parts it starts (store, staging, children, compiles)
    and the ledger they all write to. Close it (or use it as a context manager) to stop them."""
    project: Project
    options: Options = field(default_factory=Options)
    progress: Progress = quiet

    def __post_init__(self):
        self.ledger = Ledger()
        self.seconds, self.phases = self.ledger.seconds, self.ledger.phases
        self.staging = StagedCases(self.project.root, self.options, self.ledger, self._say)
        self.store = CaseStore(self.project.root, self.options, self.ledger, self._say, self.staging)
        self.compiles = Compiles(self.ledger, self._say)
        self.children = Children(self.options, self.ledger)
        self.kept = KeptBaselines(self.options, lambda: self.device()["device"])
        self._probe = Probe(self.project.root, self.options.timeout, self._say)
        self.staging_misses = self.staging.misses  # versions whose child could not open the staged cases

    def _say(self, text: str) -> None:  # the parts' progress: whatever self.progress is by then
        self.progress(text)

    def close(self, wait: bool = True) -> None:
        """Stop every part (wait=False: the children's exits and teardowns are not waited for)."""
        self.store.stop_pool()
        self.compiles.close()
        self.store.stop_deleting()  # before the folder it deletes in goes
        self.children.close(wait)
        self.staging.close()
        self.store.remove_folder()

    def __enter__(self):
        return self

    def __exit__(self, *exc):  # the end of a command: nothing is timed after it
        self.close(wait=False)

    def head_start(self, family: Family, sizes: dict[str, int] | None = None, precision: str = "fp32", ops=()) -> None:
        """Start the version's child (loading `ops`' libraries) and, unless kept, the baselines' (torch)."""
        self.children.versions(ops)
        probing = self._probe.start()  # a machine never probed: beside the references, nothing kept for it
        if self.options.time and self.options.torch and (
                probing or not self.kept.get(family, sizes or self.sizes_for(family), precision)):
            self.children.baselines([(family, precision)])

    # -- the device -----------------------------------------------------------------------
    def device(self, refresh: bool = False) -> dict:
        """{"device": ..., "ceiling": ..., "peaks": ...}; NoGPU when there is no usable GPU.
        refresh: measure the copy ceiling again instead of reading the cache."""
        return self._probe.get(refresh)

    def new_run(self) -> BenchRun:
        dev = self.device()
        return BenchRun(device=dev["device"], ceiling=dev["ceiling"],
                        date=datetime.datetime.now().isoformat(timespec="seconds"), commit=git_commit(),
                        options=asdict(self.options), peaks=dev["peaks"])

    # -- the parts, for callers outside the loops (the parts themselves are session.store,
    # .staging, .children, .compiles): Options.sizes_for and Compiles.start (for the device's arch)
    # say what each does
    def sizes_for(self, family: Family) -> dict[str, int]:
        return self.options.sizes_for(family)

    def start_compiles(self, versions: list[Version]) -> None:
        self.compiles.start(versions, arch_of(self.device()))

    # -- rows ---------------------------------------------------------------------------------
    def request(self, family: Family, sizes: dict[str, int], precision: str) -> dict:
        """The part of a rows job every provider of the family shares."""
        o = self.options
        job = RowJob(time=o.time, flush=o.flush, budget=o.budget, screen=o.screen, bytes=family.bytes_moved(sizes, precision),
                     flops=family.flops_done(sizes), ceiling_gbps=self.device()["ceiling"]["gbps"])
        return {"job": "rows", "root": str(self.project.root), "family": family.name,
                "block_sizes": o.block_sizes, **job.to_request()}

    def run_version(self, version: Version, sizes: dict[str, int] | None = None, extra_sizes=()) -> Row:
        """Check (and, unless options.time is off, time) one version in a fresh child."""
        family = version.family
        sizes = sizes or self.sizes_for(family)
        row = Row("version", family.name, version.number, version.title, sizes=sizes)
        # Sizes outside its preconditions, or a device it has no code for: refused before any case is made.
        why = f"requires {' and '.join(unmet)}" if (unmet := version.unmet(sizes)) else \
            version.arch and version.arch_refusal(arch_of(self.device()))
        if why:
            row.status, row.reason = "refused", why
            return row
        if why := version.unlisted_block_sizes(self.options.block_sizes or ()):
            raise SizesError(why)
        cases = self.store.cases(family, sizes, version.precision, extra_sizes)  # before the device is asked for
        req = {**self.request(family, sizes, version.precision),
               "providers": [{"kind": "version", "version": version.number}], "cases": cases}
        staged = self.staging.share(family, version.precision, req["cases"])
        if staged:
            req["staged"] = staged
        self.compiles.wait_for(version)
        self.children.settle()  # after the staging, which they overlapped
        self.progress(f"{version.label}: compile, check, time")
        t0 = time.perf_counter()
        res = self.children.versions().run(req, self.options.timeout)
        rows = rows_from(res, req, family.name)
        self.ledger.spent("versions", t0, rows, res)
        if staged:
            self.staging.after_version(version.label, req["cases"], res, rows[0])
        return rows[0]

    def run_baselines(self, family: Family, sizes: dict[str, int] | None = None,
                      precision: str = "fp32") -> tuple[Row | None, Row | None]:
        """The family's PyTorch equivalent, checked and timed like a version, and a plain copy of
        its bytes (the practical ceiling at this size; not for compute-bound families, where it
        says nothing), in the long-lived baseline child."""
        sizes = sizes or self.sizes_for(family)
        if not self.options.time:
            return None, None
        specs, torch_row = baseline_specs(family, sizes, precision, self.options.torch)
        if not specs:
            return torch_row, None
        if kept := self.kept.get(family, sizes, precision):
            return _torch_and_copy(kept, torch_row)
        req = {**self.request(family, sizes, precision), "providers": specs}
        if any(s["kind"] == "torch" for s in specs):
            req["cases"] = self.store.cases(family, sizes, precision)[:1]
            staged = self.staging.share(family, precision, req["cases"])  # the versions' own: no upload
            if staged:
                req["staged"] = staged
        self.progress(f"{family.name}: baselines ({', '.join(s['kind'] for s in specs)})")
        server = self.children.baselines()
        t0 = time.perf_counter()
        res = server.run(req, self.options.timeout * len(specs))
        rows = rows_from(res, req, family.name)
        self.ledger.spent("baselines", t0, rows, res)
        if len(rows) == len(specs):
            self.kept.put(family, sizes, precision, rows)
        return _torch_and_copy(rows, torch_row)

    # -- the loops ----------------------------------------------------------------------------
    def bench_family(self, family: Family, precision: str = "fp32", versions: list[Version] | None = None,
                     on_row: Callable[[Row], None] | None = None, baselines: bool = True) -> FamilyResult:
        """Every version of the family at one precision, then its baselines (baselines=False:
        later, by finish_baselines)."""
        started = time.perf_counter()
        sizes = self.sizes_for(family)
        result = FamilyResult(family.name, family.title, sizes, family.bytes_moved(sizes, precision),
                              family.flops_done(sizes), precision)
        versions = self.children.expect(versions or [v for v in family.versions if v.precision == precision])
        for version in versions:
            row = self.run_version(version, sizes)
            result.versions.append(row)
            if on_row:
                t0 = time.perf_counter()
                on_row(row)
                self.ledger.spent("writing and printing results", t0)
        result.seconds = round(time.perf_counter() - started, 2)
        if baselines:
            self.finish_baselines(family, result)
        self.children.release()  # their exits overlap the next family's staging
        return result

    def finish_baselines(self, family: Family, result: FamilyResult) -> None:
        """A benched family's baselines, their seconds added to the family's."""
        started = time.perf_counter()
        result.torch, result.copy = self.run_baselines(family, result.sizes, result.precision)
        result.seconds = round(result.seconds + time.perf_counter() - started, 2)

    def bench(self, families: list[Family], json_path: str | None = None, resume: bool = False,
              on_row: Callable[[Row], None] | None = None,
              on_family: Callable[[FamilyResult], None] | None = None) -> BenchRun:
        """Every version of every family, each precision a group of its own. With `json_path`,
        the file is rewritten after each group; with `resume`, the groups it already holds (from
        a run on this device) are kept, not run again."""
        started = time.perf_counter()
        earlier = load(json_path) if resume and json_path and Path(json_path).exists() else None
        kept = {f.key for f in earlier.families if not f.baselines_pending} if earlier is not None else set()
        groups = [(f, p) for f in families for p in f.precision_names()
                  if any(v.precision == p for v in f.versions) and (f.name, p) not in kept]
        groups.sort(key=self.store.reference_cost)  # the GPU starts on a family whose references are quick
        self._start_ahead(groups)
        t0 = time.perf_counter()
        run = self.new_run()
        self.ledger.spent("probing the device", t0)
        if earlier is not None:
            if earlier.device.get("name") != run.device.get("name"):
                raise UsageError(f"--resume: {json_path} was measured on {earlier.device.get('name')}, "
                                     f"this is {run.device.get('name')}; give another --json path")
            run.families = [f for f in earlier.families if f.key in kept]  # each written whole, baselines included
        self.start_compiles([v for f, p in groups for v in f.versions if v.precision == p])
        finishing = Finishing(self, run, json_path, started, on_family)
        for family, precision in self.store.ready_first(groups):
            hold = finishing.hold_next()
            finishing.add(family, self.bench_family(family, precision, on_row=on_row, baselines=not hold), hold)
        finishing.close()
        return run

    def _start_ahead(self, groups: list[tuple[Family, str]]) -> None:
        """What takes long to start goes first, overlapping the device probe: torch in the
        baselines' child, the case owner's context, the references, the first versions' children."""
        t0 = time.perf_counter()
        if self.options.time:
            self.children.baselines(groups)
        if self.options.stage:
            self.staging.server()
        self.store.prepare(groups)  # then the first versions' children, not when they are needed:
        self.children.versions([op for f, p in groups[:1] for v in f.versions if v.precision == p for op in v.library_ops])
        self.ledger.spent("starting children", t0)

    def _stamp(self, run: BenchRun, started: float) -> None:
        """The run's seconds and phases so far, from the ledger."""
        run.seconds = {**self.seconds, "total": round(time.perf_counter() - started, 1)}
        run.phases = {k: dict(v) for k, v in (*self.phases.items(), *self.store.timeline.items()) if v}

    def sweep(self, version: Version, axis: str, values: list[int],
              on_point: Callable[[Row, Row | None], None] | None = None) -> list[tuple[Row, Row | None]]:
        """The version at each value of one size (the others at their defaults or --sizes),
        checked there and timed, with a copy of the same bytes beside each point."""
        family = version.family
        if axis not in family.sizes:
            raise SizesError(f"--sweep {axis}: {family.name} has no size {axis} (its sizes: {', '.join(family.sizes)})")
        base = self.sizes_for(family)
        points = []
        for value in values:
            sizes = {**base, axis: value}
            try:
                family.check_sizes(sizes)
                row = self.run_version(version, sizes)
            except SizesError as e:
                row = Row("version", family.name, version.number, version.title, status="refused", reason=str(e),
                          sizes=sizes)
            copy = None
            if row.passed:
                saved, self.options.torch = self.options.torch, False
                try:
                    _, copy = self.run_baselines(family, sizes, version.precision)
                finally:
                    self.options.torch = saved
            points.append((row, copy))
            if on_point:
                on_point(row, copy)
        return points

    def check(self, versions: list[Version], on_row: Callable[[Row], None] | None = None) -> list[Row]:
        """Check versions at the family's default and test sizes, no timing."""
        saved = self.options.time
        self.options.time = False
        try:
            rows = []
            for v in versions:
                rows.append(self.run_version(v))
                if on_row:
                    on_row(rows[-1])
            return rows
        finally:
            self.options.time = saved


class Finishing:
    """A bench's families as their versions end: each one's baselines, then its cases dropped,
    its result put in the run and written to the --json (RunFile), its table shown.

    At a bench's start the baselines' child imports torch and warms the torch expressions while
    the 16 cores are busy with nvcc and the references (10-20 s); until it says it is ready, a
    family's baselines are held back and the GPU goes on with the next families' versions. The
    held ones run once it is ready, or once HELD_BACK wait (their cases stay on disk until then).
    A held family is written to the --json at once, marked as waiting for its baselines: a bench
    stopped meanwhile keeps its rows, and --resume runs it again."""

    def __init__(self, session: Session, run: BenchRun, json_path: str | None, started: float,
                 on_family: Callable[[FamilyResult], None] | None):
        self.session, self.run, self.started, self.on_family = session, run, started, on_family
        self.out = RunFile(json_path) if json_path else None
        self.held: list[tuple[Family, FamilyResult]] = []

    def hold_next(self) -> bool:
        """Whether the next family's baselines wait (the held ones first run if the child is
        ready by now, or if HELD_BACK wait)."""
        children = self.session.children
        if self.held and (len(self.held) >= HELD_BACK or children.baselines_ready()):
            self.finish_held()
        return self.session.options.time and not children.baselines_ready()

    def add(self, family: Family, result: FamilyResult, held: bool) -> None:
        if held:
            self.held.append((family, result))
            result.baselines_pending = True
            self.session.ledger.spent("writing and printing results", self._write(result))
        else:
            self._done(family, result)

    def finish_held(self) -> None:
        self.session.children.settle()  # no baseline is timed beside version children tearing down
        for family, result in self.held:
            self.session.finish_baselines(family, result)
            result.baselines_pending = False
            self._done(family, result)
        self.held.clear()

    def close(self) -> None:
        self.finish_held()
        self.session.children.settle()
        self.session._stamp(self.run, self.started)
        if self.out:
            self.out.save(self.run)

    def _done(self, family: Family, result: FamilyResult) -> None:
        self.session.store.drop(family)
        t0 = self._write(result)
        if self.on_family:
            self.on_family(result)
        self.session.ledger.spent("writing and printing results", t0)

    def _write(self, result: FamilyResult) -> float:
        """Put the family in the run and write the --json (nothing lost if a later one stops us)."""
        self.run.put(result)
        self.session._stamp(self.run, self.started)
        t0 = time.perf_counter()
        if self.out:
            self.out.save(self.run)
        return t0


def _torch_and_copy(rows: list[Row], torch_row: Row | None) -> tuple[Row | None, Row | None]:
    by_kind = {r.kind: r for r in rows}
    return by_kind.get("torch", torch_row), by_kind.get("copy")


def rows_from(res: dict, req: dict, family: str) -> list[Row]:
    """The rows a job produced; where it crashed or hung, the row it was on (and any it never
    reached) carries the job's status and reason."""
    rows = [Row.from_json(r, family) for r in res.get("rows", [])]
    for r in rows:
        if r.status == "started":
            r.status, r.reason = res.get("status", "crashed"), res.get("reason", "no result")
            r.stderr = res.get("stderr")
    for spec in req["providers"][len(rows):]:
        rows.append(Row(spec["kind"], family, spec.get("version"), status=res.get("status", "crashed"),
                        reason=f"not run: {res.get('reason', 'the worker stopped')}"))
    if res.get("status") not in ("passed", None) and all(r.status == "passed" for r in rows):
        for r in rows:
            r.status, r.reason = res["status"], res.get("reason")
    return rows


def git_commit() -> str | None:
    """The project's commit (WORKBENCH_COMMIT when the tree travelled without its .git)."""
    if os.environ.get("WORKBENCH_COMMIT"):
        return os.environ["WORKBENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=PROJECT_ROOT,
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None
