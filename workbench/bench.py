"""The loops behind `run`, `check` and `bench`: build the reference cases, run each row in a
child process, and gather typed results (results.py), written to JSON as they come.

It prints nothing: callers pass a `progress(text)` callback and render the returned records with
report.py. The order of work in a bench, and why:

* the device is probed once (its copy ceiling is measured once per device and cached);
* every version is compiled in a background process pool, niced, without a GPU context
  (compile.compile_in_pool); each version's row waits only for its own compile;
* every family's reference cases are computed in a process pool in the background, and the
  families are benched in the order their cases become ready, so the GPU never waits on one
  family's references while another's are done;
* per family: each version in a fresh child (isolate.Server with one job per child, the next
  child started ahead so its interpreter and CUDA context are ready; a finished child is kept
  idle and the family's are let go together, their exits overlapping the next family's
  staging, never a timed job), then the baselines
  (PyTorch and a same-size copy) in one long-lived child (torch loads once); the family's
  results, baselines included, go to the JSON file at once, so a stopped bench keeps all it
  measured and `--resume` skips the families already there;
* timing: every block size briefly, then the front-runners (within 5% of the best, two at
  most) with the rest of the budget, going on from their screening samples (providers.py).
"""

from __future__ import annotations

import datetime
import importlib.util
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .check import make_case, save_case
from .errors import NoGPU, SizesError, WorkbenchError
from .family import PROJECT_ROOT, Family, Project, Version
from .isolate import DEFAULT_TIMEOUT, Server, run_job
from .results import BenchRun, FamilyResult, Row, load, save


@dataclass
class Options:
    sizes: str | None = None            # "B=4,T=2048" over the family's defaults
    block_sizes: list[int] | None = None
    seed: int = 0
    seeds: int = 3
    test_sizes: bool = True             # also check at the family's (odd) test sizes
    timeout: float = DEFAULT_TIMEOUT
    budget: float = 0.3                 # seconds of timing per block size (front-runners)
    torch: bool = True
    flush: bool = True
    time: bool = True                   # False: check only
    screen: bool = True                 # time every block size briefly, the front-runners fully
    stage: bool = True                  # upload each family's cases once, shared by its versions (staging.py)


Progress = Callable[[str], None]
# Version children started ahead: a child's start (interpreter, imports, CUDA context) takes about
# as long as a typical version's check and timing, so one started ahead still kept the GPU waiting.
STANDBY = 2
# The pools' workers start from a fork server, not a fork of this process: a fork would copy our
# threads' locks mid-use and the write ends of the version children's stdin pipes (which then
# never see their end of file).
_POOL_START = multiprocessing.get_context("forkserver")

# Version children done with their job, kept idle and let go together after the family's versions
# (their CUDA teardowns side by side, while nothing is timed) rather than waited for one by one.
LINGER = 12
# The reference cases may hold this share of the free disk at the session's start (at least the
# minimum), leaving a quarter to everything else. On the H100's host (69 GB free) 40% held the
# bench --all up by 39 s waiting for the large families' references (228 s against 191).
CASE_BUDGET_SHARE = 0.75
CASE_BUDGET_MIN = 4 * 1024**3


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a background pool now: queued work is cancelled and work under way is killed, not
    waited for. A session closed early (a bench stopped, a test run of a few families) would
    otherwise wait for the references and compiles it had started for families it will never
    reach: minutes, on the H100's host, for a GPU test run of two families. Nothing is lost: case
    files live in the session's own folder, deleted next, and the compile cache is written by
    rename."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public kill before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join(timeout=10)


def _quiet(_: str) -> None:
    pass


@dataclass
class Session:
    project: Project
    options: Options = field(default_factory=Options)
    progress: Progress = _quiet

    def __post_init__(self):
        self._tmp = Path(tempfile.mkdtemp(prefix="workbench-cases-"))
        self._cases: dict[tuple, list[str]] = {}
        self._pending: dict[tuple, Future] = {}   # cases being computed in the background
        self._queued: list[tuple] = []             # (key, family, precision, plan, folder) not yet started
        self._case_bytes: dict[tuple, int] = {}    # estimated disk bytes of each queued or started group's cases
        # How far the references may run ahead of the GPU, in bytes of case files on disk: every
        # family's cases at once would be ~90 GB (softmax alone 10), more than the H100 host's
        # disk, and a stalled version once let them fill it.
        self.case_budget = max(CASE_BUDGET_MIN, int(shutil.disk_usage(self._tmp).free * CASE_BUDGET_SHARE))
        self._pool: ProcessPoolExecutor | None = None
        self._compile_pool: ProcessPoolExecutor | None = None
        self._deleter: ThreadPoolExecutor | None = None  # deletes finished families' case files
        self._compiles: dict[str, Future] = {}    # version path -> its background compile
        self._server: Server | None = None     # the baselines' long-lived child
        self._versions: Server | None = None   # a fresh child per version, STANDBY of them started ahead
        self._device: dict | None = None
        self._stager: Server | None = None       # the case owner: a long-lived child (staging.py)
        self._staged: dict[str, dict] = {}       # case path -> its buffers' (bundle, offset, nbytes)
        self._bundles: dict[str, str] = {}       # bundle id -> its IPC handle
        self._stage_owner: int | None = None     # the owner's pid: its memory dies with it
        self._staged_group: tuple[str, str] | None = None  # one (family, precision) staged at a time
        self.staging_misses: list[str] = []      # versions whose child could not open the staged cases
        self.seconds: dict[str, float] = {}      # where the time went, by activity
        self.phases: dict[str, dict[str, float]] = {}  # "versions"/"baselines" -> the rows' phases summed

    def close(self) -> None:
        for pool in (self._pool, self._compile_pool):
            if pool is not None:
                _stop_pool(pool)
        if self._deleter is not None:
            self._deleter.shutdown(wait=True)  # before the folder it deletes in goes
        for server in (self._server, self._versions, self._stager):
            if server is not None:
                server.close()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _spent(self, what: str, since: float, rows: list[Row] = (), res: dict | None = None) -> None:
        self.seconds[what] = round(self.seconds.get(what, 0.0) + time.perf_counter() - since, 1)
        phases = self.phases.setdefault(what, {}) if rows else {}
        for row in rows:
            for phase, sec in row.phases.items():
                phases[phase] = round(phases.get(phase, 0.0) + sec, 2)
        for phase, sec in (hand_offs(res, rows) if res and rows else {}).items():
            phases[phase] = round(phases.get(phase, 0.0) + sec, 2)

    # -- the device -----------------------------------------------------------------------
    def device(self, refresh: bool = False) -> dict:
        """{"device": ..., "ceiling": ..., "peaks": ...}; NoGPU when there is no usable GPU.
        refresh: measure the copy ceiling again instead of reading the cache."""
        if self._device is None or refresh:
            require_pycuda()
            self.progress("measuring the device's copy bandwidth (cached after the first run)")
            res = run_job({"job": "probe", "root": str(self.project.root), "refresh": refresh}, self.options.timeout)
            if res.get("status") == "no_gpu":
                raise NoGPU(f"{res['reason']}. The workbench needs an NVIDIA GPU with a working "
                            "driver; without one, use Modal: modal run modal_app.py")
            if res.get("status") != "passed":
                raise NoGPU(f"the device probe failed: {res.get('reason', res.get('status'))}")
            self._device = {"device": res["device"], "ceiling": res["ceiling"], "peaks": res.get("peaks") or {}}
        return self._device

    def new_run(self) -> BenchRun:
        dev = self.device()
        return BenchRun(device=dev["device"], ceiling=dev["ceiling"],
                        date=datetime.datetime.now().isoformat(timespec="seconds"), commit=git_commit(),
                        options=asdict(self.options), peaks=dev["peaks"])

    # -- cases --------------------------------------------------------------------------------
    def sizes_for(self, family: Family) -> dict[str, int]:
        return family.parse_sizes(self.options.sizes)

    def seeds(self) -> list[int]:
        return [self.options.seed + i for i in range(max(1, self.options.seeds))]

    def _case_plan(self, family: Family, sizes: dict[str, int], precision: str, extra_sizes=(), seeds=None):
        """(key, [(sizes, seed), ...]): the timed sizes first (their first seed is the one timed;
        two seeds, since they are the large ones), then any extra sizes (the trainer's, when
        promoting) and the family's test sizes, each at every seed."""
        seeds = self.seeds()[:seeds] if seeds else self.seeds()
        test_sizes = family.test_sizes if self.options.test_sizes else []
        key = (family.name, precision, tuple(sorted(sizes.items())),
               tuple(tuple(sorted(e.items())) for e in extra_sizes), tuple(seeds), bool(test_sizes))
        plan = [(sizes, seed) for seed in seeds[:2]]
        others: list[dict] = []
        for s in [*extra_sizes, *test_sizes]:
            if s != sizes and s not in others:
                others.append(s)
        plan += [(s, seed) for s in others for seed in seeds]
        return key, plan

    def cases(self, family: Family, sizes: dict[str, int], precision: str = "fp32", extra_sizes=(),
              seeds: int | None = None) -> list[str]:
        """Case files for the sizes (timed first), the extra sizes and the test sizes, at the
        session's seeds (or the first `seeds` of them)."""
        key, plan = self._case_plan(family, sizes, precision, extra_sizes, seeds)
        t0 = time.perf_counter()
        for i, queued in enumerate(self._queued):
            if queued[0] == key:  # asked for before its turn: it goes next, now
                self._queued.insert(0, self._queued.pop(i))
                self._top_up(force=True)
                break
        if key in self._pending:
            self.progress(f"{family.name}: waiting for its reference cases")
            self._cases[key] = self._pending.pop(key).result()
        if key not in self._cases:
            self.progress(f"{family.name}: computing the reference at {len(plan)} size sets x seeds")
            folder = self._tmp / f"{family.name}-{precision}-{len(self._cases)}"
            self._cases[key] = build_cases(str(self.project.root), family.name, precision, plan, str(folder))
        self._spent("waiting for references", t0)
        return self._cases[key]

    def prepare_cases(self, groups: list[tuple[Family, str]]) -> None:
        """Compute the reference cases of many (family, precision) groups in the background, in
        order: the GPU work on the first overlaps the references of the rest. Groups start while
        the cases started and not yet dropped fit the case budget (one always may, so that the
        first is never held back); the rest wait in a queue until drop_cases frees room."""
        if self._pool is None:  # niced (less than the compiles): the processes driving the GPU come first.
            # Torch baselines launch several kernels from Python: with the references at full priority
            # on 8 cores, 1-2 of them a bench --all on the H100 timed 2-3x slow (p80/p20 2-3.4), all in its
            # first half, while the references were being computed
            self._pool = ProcessPoolExecutor(max_workers=min(8, os.cpu_count() or 1), initializer=os.nice,
                                             initargs=(5,), mp_context=_POOL_START)
        queued = {q[0] for q in self._queued}
        for i, (family, precision) in enumerate(groups):
            key, plan = self._case_plan(family, self.sizes_for(family), precision)
            if key not in self._cases and key not in self._pending and key not in queued:
                self._queued.append((key, family, precision, plan, str(self._tmp / f"{family.name}-{precision}-p{i}")))
                self._case_bytes[key] = estimated_case_bytes(family, precision, plan)
                queued.add(key)
        self._top_up()

    def _held_bytes(self) -> int:
        return sum(self._case_bytes.get(k, 0) for k in (*self._pending, *self._cases))

    def _top_up(self, force: bool = False) -> None:
        """Start queued groups while their cases fit the budget beside those started and not yet
        dropped; with nothing under way (or force), the next one regardless of its size."""
        while self._queued:
            key, family, precision, plan, folder = self._queued[0]
            if not (force or not self._pending or self._held_bytes() + self._case_bytes[key] <= self.case_budget):
                return
            self._queued.pop(0)
            self._pending[key] = self._pool.submit(build_cases, str(self.project.root), family.name, precision,
                                                   plan, folder)
            force = False

    def drop_cases(self, family: Family) -> None:
        """Delete a family's case files (a bench of every family would otherwise fill the disk)
        and free its staged cases on the device."""
        keys = [k for k in self._cases if k[0] == family.name]
        paths = [path for key in keys for path in self._cases.pop(key)]
        for key in keys:
            self._case_bytes.pop(key, None)
        self._top_up()  # their room goes to the groups waiting
        staged = [p for p in paths if p in self._staged]
        if staged:
            self._release_staged(staged)
        # Deleting gigabytes of case files took ~0.4 s a family on the H100's host (22 s of a
        # bench --all): a background thread does it while the next family runs.
        if self._deleter is None:
            self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="case-deleter")
        for path in paths:
            self._deleter.submit(shutil.rmtree, path, True)

    # -- staged cases (staging.py) ---------------------------------------------------------------
    def _stage_server(self) -> Server:
        """The case owner, started on first use (bench starts it early: its start overlaps)."""
        if self._stager is None:
            self._stager = Server().start()
        return self._stager

    def _release_staged(self, paths: list[str] | None = None) -> None:
        """Free these staged cases on the device (every one when None) and forget them here."""
        t0 = time.perf_counter()
        self._stage_job({"action": "release", "cases": paths})
        for p in list(self._staged) if paths is None else paths:
            self._staged.pop(p, None)
        if not self._staged:
            self._bundles.clear()
        self._spent("releasing staged cases", t0)

    def _stage_job(self, job: dict) -> dict:
        res = self._stage_server().run({"job": "stage", "root": str(self.project.root), **job}, self.options.timeout)
        if res.get("status") != "passed" or res.get("pid") != self._stage_owner:
            self._staged.clear()  # failed, or a new child: whatever was staged died with the old one
            self._bundles.clear()
            self._stage_owner = res.get("pid") if res.get("status") == "passed" else None
        return res

    def staged(self, family: Family, precision: str, paths: list[str]) -> dict | None:
        """What a child needs to open these cases, staged on the device by the case owner (uploaded
        there on first use, one family at a time): {"bundles": {id: IPC handle}, "cases": {path:
        buffers}}; None when staging is off or failed: the children upload the cases themselves."""
        if not self.options.stage:
            return None
        if self._staged and self._staged_group != (family.name, precision):
            self._release_staged()  # another family's: device memory holds one at a time
        self._staged_group = (family.name, precision)
        for _ in range(2):  # twice: if the owner had restarted, what it held is gone and is staged anew
            missing = [p for p in paths if p not in self._staged]
            if missing:
                t0 = time.perf_counter()
                res = self._stage_job({"action": "stage", "family": family.name, "precision": precision,
                                       "cases": missing})
                self._spent("staging cases", t0)
                if res.get("status") != "passed":
                    self.progress(f"{family.name}: cases not staged ({res.get('reason', res.get('status'))}): "
                                  "each version uploads them")
                    return None
                self._staged.update(res["staged"]["cases"])
                self._bundles.update(res["staged"]["bundles"])
            if all(p in self._staged for p in paths):
                cases = {p: self._staged[p] for p in paths}
                used = {str(b) for entry in cases.values() for bufs in entry.values() for b, _, _ in bufs.values()}
                return {"bundles": {b: self._bundles[b] for b in used}, "cases": cases}
        return None

    def _check_staged(self, paths: list[str], row: Row) -> None:
        """After a version: were the staged cases it opened left as they were? A version that
        wrote into them (out of bounds) fails; the owner has uploaded them again."""
        res = self._stage_job({"action": "verify", "cases": paths})
        changed = res.get("changed") or []
        if changed and row.status == "passed":
            row.status = "failed"
        if changed:
            row.reason = ((row.reason + "; ") if row.reason else "") + \
                "wrote outside its own buffers: it changed the shared reference case (" + ", ".join(changed[:3]) + ")"

    def start_compiles(self, versions: list[Version]) -> None:
        """Compile the versions in the background, in the order given, for the device's arch (into
        the cache): the GPU works on the first versions while the later ones compile; run_version
        waits for its own."""
        from .compile import compile_in_pool
        cc = self.device()["device"]["compute_capability"].replace(".", "")
        self.progress(f"compiling {len(versions)} versions in the background for sm_{cc}")
        if self._compile_pool is None:  # niced more: the GPU's own processes, then the references, come first
            self._compile_pool = ProcessPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) - 2),
                                                     initializer=os.nice, initargs=(10,), mp_context=_POOL_START)
        for v in versions:
            if str(v.path) not in self._compiles:
                self._compiles[str(v.path)] = compile_in_pool(self._compile_pool, v.path, f"sm_{cc}")

    def _compiled(self, version: Version) -> None:
        """Wait for the version's background compile, if one was started."""
        future = self._compiles.get(str(version.path))
        if future is not None and not future.done():
            t0 = time.perf_counter()
            self.progress(f"{version.label}: waiting for its compile")
            future.result()
            self._spent("waiting for compiles", t0)

    # -- rows ---------------------------------------------------------------------------------
    def request(self, family: Family, sizes: dict[str, int], precision: str) -> dict:
        """The part of a rows job every provider of the family shares."""
        return {"job": "rows", "root": str(self.project.root), "family": family.name,
                "block_sizes": self.options.block_sizes, "budget": self.options.budget,
                "flush": self.options.flush, "time": self.options.time, "screen": self.options.screen,
                "bytes": family.bytes_moved(sizes, precision), "flops": family.flops_done(sizes),
                "ceiling_gbps": self.device()["ceiling"]["gbps"]}

    def run_version(self, version: Version, sizes: dict[str, int] | None = None, extra_sizes=()) -> Row:
        """Check (and, unless options.time is off, time) one version in a fresh child."""
        family = version.family
        sizes = sizes or self.sizes_for(family)
        row = Row("version", family.name, version.number, version.title, sizes=sizes)
        unmet = version.unmet(sizes)
        if unmet:
            row.status, row.reason = "refused", f"requires {' and '.join(unmet)}"
            return row
        if why := version.unlisted_block_sizes(self.options.block_sizes or ()):
            raise SizesError(why)
        req = {**self.request(family, sizes, version.precision),
               "providers": [{"kind": "version", "version": version.number}],
               "cases": self.cases(family, sizes, version.precision, extra_sizes)}
        staged = self.staged(family, version.precision, req["cases"])
        if staged:
            req["staged"] = staged
        self._compiled(version)
        self.settle_children()  # after the staging, which they overlapped
        self.progress(f"{version.label}: compile, check, time")
        t0 = time.perf_counter()
        res = self._version_server().run(req, self.options.timeout)
        rows = rows_from(res, req, family.name)
        self._spent("versions", t0, rows, res)
        if staged and not str(res.get("staging", "")).startswith("used"):  # it uploaded its own
            self.staging_misses.append(f"{version.label}: staged cases {res.get('staging', 'not opened')}")
            self.progress(self.staging_misses[-1])
        if staged:
            t0 = time.perf_counter()
            self._check_staged(req["cases"], rows[0])
            self._spent("staging cases", t0)
        return rows[0]

    def run_baselines(self, family: Family, sizes: dict[str, int] | None = None,
                      precision: str = "fp32") -> tuple[Row | None, Row | None]:
        """The family's PyTorch equivalent, checked and timed like a version, and a plain copy of
        its bytes (the practical ceiling at this size; not for compute-bound families, where it
        says nothing), in the long-lived baseline child."""
        sizes = sizes or self.sizes_for(family)
        if not self.options.time:
            return None, None
        specs = []
        torch_row = None
        if self.options.torch and family.torch_expression(precision):
            if importlib.util.find_spec("torch") is None:
                torch_row = Row("torch", family.name, title="torch", status="unavailable",
                                reason="torch is not installed")
            else:
                specs.append({"kind": "torch", "precision": precision})
        if not family.flops:
            specs.append({"kind": "copy", "bytes": family.bytes_moved(sizes, precision)})
        if not specs:
            return torch_row, None
        req = {**self.request(family, sizes, precision), "providers": specs}
        if any(s["kind"] == "torch" for s in specs):
            req["cases"] = self.cases(family, sizes, precision)[:1]
            staged = self.staged(family, precision, req["cases"])  # the versions' own: no upload
            if staged:
                req["staged"] = staged
        self.progress(f"{family.name}: baselines ({', '.join(s['kind'] for s in specs)})")
        server = self._baseline_server()
        t0 = time.perf_counter()
        res = server.run(req, self.options.timeout * len(specs))
        rows = rows_from(res, req, family.name)
        self._spent("baselines", t0, rows, res)
        by_kind = {r.kind: r for r in rows}
        return by_kind.get("torch", torch_row), by_kind.get("copy")

    def release_children(self) -> None:
        """Let the finished version children go, all at once (see LINGER); their exits are waited
        for before the next version runs (settle_children), so whatever comes first overlaps them."""
        if self._versions is not None:
            self._versions.release(wait=False)

    def settle_children(self) -> None:
        """Wait for the version children let go to have ended (none may tear down beside a job)."""
        if self._versions is not None:
            t0 = time.perf_counter()
            self._versions.settle()
            self._spent("releasing finished children", t0)

    def _version_server(self) -> Server:
        """Children for the versions, a fresh one per version, STANDBY of them started ahead."""
        if self._versions is None:
            self._versions = Server(jobs_per_child=1, standby=STANDBY, linger=LINGER).start()
        return self._versions

    def _baseline_server(self) -> Server:
        """The baselines' long-lived child, started on first use; torch is imported as it starts
        (when the session times against torch), so that cost overlaps the caller's next work."""
        if self._server is None:
            torch = self.options.time and self.options.torch and importlib.util.find_spec("torch") is not None
            self._server = Server(preload=("torch",) if torch else ()).start()
        return self._server

    def bench_family(self, family: Family, precision: str = "fp32", versions: list[Version] | None = None,
                     on_row: Callable[[Row], None] | None = None) -> FamilyResult:
        """Every version of the family at one precision, then its baselines."""
        started = time.perf_counter()
        sizes = self.sizes_for(family)
        result = FamilyResult(family.name, family.title, sizes, family.bytes_moved(sizes, precision),
                              family.flops_done(sizes), precision)
        for version in versions or [v for v in family.versions if v.precision == precision]:
            row = self.run_version(version, sizes)
            result.versions.append(row)
            if on_row:
                t0 = time.perf_counter()
                on_row(row)
                self._spent("writing and printing results", t0)
        result.torch, result.copy = self.run_baselines(family, sizes, precision)
        self.release_children()  # their exits overlap the next family's staging
        result.seconds = round(time.perf_counter() - started, 2)
        return result

    def bench(self, families: list[Family], json_path: str | None = None, resume: bool = False,
              on_row: Callable[[Row], None] | None = None,
              on_family: Callable[[FamilyResult], None] | None = None) -> BenchRun:
        """Every version of every family, each precision a group of its own. With `json_path`,
        the file is rewritten after each group; with `resume`, the groups it already holds (from
        a run on this device) are kept, not run again."""
        started = time.perf_counter()
        earlier = load(json_path) if resume and json_path and Path(json_path).exists() else None
        groups = [(f, p) for f in families for p in f.precision_names()
                  if any(v.precision == p for v in f.versions) and (earlier is None or earlier.family(f.name, p) is None)]
        groups.sort(key=self._reference_cost)  # the GPU starts on a family whose references are quick
        # What takes long to start goes first, overlapping the device probe: torch in the
        # baselines' child, the case owner's context, the references.
        t0 = time.perf_counter()
        if self.options.time:
            self._baseline_server()
        if self.options.stage:
            self._stage_server()
        self.prepare_cases(groups)
        self._version_server()  # the first versions' children start now, not when they are needed
        self._spent("starting children", t0)
        t0 = time.perf_counter()
        run = self.new_run()
        self._spent("probing the device", t0)
        if earlier is not None:
            if earlier.device.get("name") != run.device.get("name"):
                raise WorkbenchError(f"--resume: {json_path} was measured on {earlier.device.get('name')}, "
                                     f"this is {run.device.get('name')}; give another --json path")
            run.families = earlier.families  # each was written whole, baselines included
        self.start_compiles([v for f, p in groups for v in f.versions if v.precision == p])
        for family, precision in self._ready_first(groups):
            result = self.bench_family(family, precision, on_row=on_row)
            self.drop_cases(family)
            run.put(result)
            run.seconds = {**self.seconds, "total": round(time.perf_counter() - started, 1)}
            run.phases = {k: dict(v) for k, v in self.phases.items()}
            t0 = time.perf_counter()
            if json_path:
                save(json_path, run)  # after each family: nothing lost if a later one stops us
            if on_family:
                on_family(result)
            self._spent("writing and printing results", t0)
        self.settle_children()
        run.seconds = {**self.seconds, "total": round(time.perf_counter() - started, 1)}
        run.phases = {k: dict(v) for k, v in self.phases.items()}
        if json_path:
            save(json_path, run)
        return run

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

    def _reference_cost(self, group: tuple[Family, str]) -> float:
        """A rough guess of the seconds a group's float64 references take: their bytes at ~1 GB/s
        and their FLOPs at ~10 GFLOP/s (AdamW's 124M parameters, sgemm's 4096^3 product)."""
        family, precision = group
        sizes = self.sizes_for(family)
        return family.bytes_moved(sizes, precision) / 1e9 + (family.flops_done(sizes) or 0) / 1e10

    def _ready_first(self, groups: list[tuple[Family, str]]):
        """The groups in the order their reference cases become ready (bench order among the
        ready ones): the GPU never waits on one family's references while another's are done."""
        from concurrent.futures import FIRST_COMPLETED, wait
        left = list(groups)
        while left:
            keys = {id(g): self._case_plan(g[0], self.sizes_for(g[0]), g[1])[0] for g in left}
            futures = {id(g): self._pending.get(keys[id(g)]) for g in left}
            queued = {q[0] for q in self._queued}
            ready = [g for g in left if keys[id(g)] not in queued and (futures[id(g)] is None or futures[id(g)].done())]
            if not ready:
                under_way = [f for f in futures.values() if f is not None]
                if not under_way:  # all that is left waits for room that only its own start can make
                    self._top_up(force=True)
                    continue
                t0 = time.perf_counter()
                self.progress("waiting for the reference cases")
                wait(under_way, return_when=FIRST_COMPLETED)
                self._spent("waiting for references", t0)
                continue
            left.remove(ready[0])
            yield ready[0]

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


def hand_offs(res: dict, rows: list[Row]) -> dict[str, float]:
    """A job's seconds outside its rows' phases, from the parent's and the child's clocks (one
    system clock): 'child start' from the request sent to the child beginning it (a child not
    yet ready: its imports and CUDA context), 'job set-up' the child's own work around the rows
    (opening the staged cases, reading the family), 'child exit' from its answer written to the
    parent done with it (a one-job child's exit and CUDA teardown). Empty when a clock is
    missing (a crashed child)."""
    clock, began, ended = res.get("clock") or {}, res.get("began"), res.get("ended")
    if not clock or began is None or ended is None:
        return {}
    in_rows = sum(sum(r.phases.values()) for r in rows)
    return {"child start": max(0.0, began - clock["sent"]),
            "job set-up": max(0.0, ended - began - in_rows),
            "child exit": max(0.0, clock["exited"] - ended)}


def estimated_case_bytes(family: Family, precision: str, plan) -> int:
    """The disk bytes build_cases will write for this plan: each input at its width, each
    output's expected values as float32 (check.save_case)."""
    total = 0
    for sizes, _ in plan:
        for arg in family.args_for(precision):
            n = int(np.prod(family.shape(arg, sizes)))
            if arg.is_input:
                total += n * np.dtype(arg.np_dtype).itemsize
            if arg.is_output:
                total += n * 4
    return total


def build_cases(root: str, family_name: str, precision: str, plan, folder: str) -> list[str]:
    """Draw inputs and run the reference for each (sizes, seed); save them for the workers."""
    family = Project(root).family(family_name)
    paths = []
    for i, (sizes, seed) in enumerate(plan):
        path = f"{folder}/{i}"
        save_case(make_case(family, sizes, seed, precision), path)
        paths.append(path)
    return paths


def require_pycuda() -> None:
    if importlib.util.find_spec("pycuda") is None:
        raise NoGPU("PyCUDA is not installed. On a machine with a CUDA GPU and toolkit: "
                    "pip install -e '.[gpu]'  (or use Modal: modal run modal_app.py)")


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
