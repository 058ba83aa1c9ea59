"""The core loop behind `run` and `bench`: build cases, run each version in its own process,
time the PyTorch baseline, and put the figures (bandwidth, % of ceiling, speedups) together.

It prints nothing: callers pass a `progress(text, advance)` callback and render the returned
dicts with report.py.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .check import make_case, save_case
from .errors import NoGPU, SizesError
from .family import PROJECT_ROOT, Family, Project, Version
from .isolate import DEFAULT_TIMEOUT, run_job


@dataclass
class Options:
    sizes: str | None = None            # "B=4,T=2048" over the family's defaults
    block_sizes: list[int] | None = None
    seed: int = 0
    seeds: int = 3
    test_sizes: bool = True             # also check at the family's (odd) test sizes
    timeout: float = DEFAULT_TIMEOUT
    budget: float = 0.4                 # seconds of timing per block size
    torch: bool = True
    flush: bool = True
    time: bool = True                   # False: check only


Progress = Callable[[str], None]


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
        self._pending: dict[tuple, object] = {}  # futures of cases being computed in the background
        self._pool = None
        self._device: dict | None = None
        self._baselines: dict[str, dict] = {}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the device -----------------------------------------------------------------------
    def device(self) -> dict:
        """Device metadata and the measured copy ceiling; NoGPU when there is no usable GPU."""
        if self._device is None:
            if importlib.util.find_spec("pycuda") is None:
                raise NoGPU("PyCUDA is not installed. On a machine with a CUDA GPU and toolkit: "
                            "pip install -e '.[gpu]'  (or use Modal: modal run modal_app.py)")
            self.progress("measuring the device's copy bandwidth (cached after the first run)")
            res = run_job({"job": "probe", "root": str(self.project.root)}, self.options.timeout)
            if res.get("status") == "no_gpu":
                raise NoGPU(f"{res['reason']}. The workbench needs an NVIDIA GPU with a working "
                            "driver; without one, use Modal: modal run modal_app.py")
            if res.get("status") != "passed":
                raise NoGPU(f"the device probe failed: {res.get('reason', res.get('status'))}")
            self._device = {"device": res["device"], "ceiling": res["ceiling"]}
        return self._device

    # -- cases --------------------------------------------------------------------------------
    def sizes_for(self, family: Family) -> dict[str, int]:
        return family.parse_sizes(self.options.sizes)

    def seeds(self) -> list[int]:
        return [self.options.seed + i for i in range(max(1, self.options.seeds))]

    def _case_plan(self, family: Family, sizes: dict[str, int], extra_sizes=()):
        """(key, [(sizes, seed), ...]): the timed sizes first (their first seed is the one timed;
        two seeds, since they are the large ones), then any extra sizes (the trainer's, when
        promoting) and the family's test sizes, each at every seed."""
        key = (family.name, tuple(sorted(sizes.items())), tuple(tuple(sorted(e.items())) for e in extra_sizes),
               tuple(self.seeds()), self.options.test_sizes)
        plan = [(sizes, seed) for seed in self.seeds()[:2]]
        others: list[dict] = []
        for s in [*extra_sizes, *(family.test_sizes if self.options.test_sizes else [])]:
            if s != sizes and s not in others:
                others.append(s)
        plan += [(s, seed) for s in others for seed in self.seeds()]
        return key, plan

    def cases(self, family: Family, sizes: dict[str, int], extra_sizes=()) -> list[str]:
        key, plan = self._case_plan(family, sizes, extra_sizes)
        if key in self._pending:
            self.progress(f"{family.name}: waiting for its reference cases")
            self._cases[key] = self._pending.pop(key).result()
        if key not in self._cases:
            self.progress(f"{family.name}: computing the reference at {len(plan)} size sets x seeds")
            folder = self._tmp / f"{family.name}-{len(self._cases)}"
            self._cases[key] = _build_cases(str(self.project.root), family.name, plan, str(folder))
        return self._cases[key]

    def prepare_cases(self, families: list[Family]) -> None:
        """Start computing many families' reference cases in the background, a process per
        family, in order: the GPU work on the first family overlaps the references of the rest."""
        from concurrent.futures import ProcessPoolExecutor
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=min(8, os.cpu_count() or 1))
        for i, family in enumerate(families):
            key, plan = self._case_plan(family, self.sizes_for(family))
            if key not in self._cases and key not in self._pending:
                self._pending[key] = self._pool.submit(_build_cases, str(self.project.root), family.name, plan,
                                                       str(self._tmp / f"{family.name}-p{i}"))

    def precompile(self, versions: list[Version]) -> None:
        """Compile every version ahead, in parallel, for the device's arch (fills the cache)."""
        from .compile import precompile
        cc = self.device()["device"]["compute_capability"].replace(".", "")
        self.progress(f"compiling {len(versions)} versions in parallel for sm_{cc}")
        precompile([v.path for v in versions], f"sm_{cc}")

    def drop_cases(self, family: Family, keep_first: bool = False) -> None:
        """Delete a family's case files (all but the first timed one, which the torch baseline
        uses, when keep_first): a bench of every family would otherwise fill the disk."""
        for key in [k for k in self._cases if k[0] == family.name]:
            paths = self._cases[key]
            for p in paths[1:] if keep_first else paths:
                shutil.rmtree(p, ignore_errors=True)
            if keep_first:
                self._cases[key] = paths[:1]
            else:
                del self._cases[key]

    # -- jobs ---------------------------------------------------------------------------------
    def run_version(self, version: Version, sizes: dict[str, int] | None = None, extra_sizes=()) -> dict:
        family = version.family
        sizes = sizes or self.sizes_for(family)
        unmet = version.unmet(sizes)
        if unmet:
            return {"family": family.name, "version": version.number, "title": version.title,
                    "status": "refused", "reason": f"requires {' and '.join(unmet)}"}
        if self.options.block_sizes:
            bad = [b for b in self.options.block_sizes if b not in version.block_sizes]
            if bad:
                raise SizesError(f"{version.label} does not sweep block size(s) {bad}: "
                                 f"its header lists {list(version.block_sizes)}")
        device = self.device()
        cases = self.cases(family, sizes, extra_sizes)
        self.progress(f"{version.label}: compile, check, time")
        res = run_job({"job": "version", "root": str(self.project.root), "family": family.name,
                       "version": version.number, "cases": cases, "block_sizes": self.options.block_sizes,
                       "budget": self.options.budget, "flush": self.options.flush,
                       "time": self.options.time},
                      self.options.timeout)
        res.setdefault("family", family.name)
        res.setdefault("version", version.number)
        res.setdefault("title", version.title)
        return derive(res, family, sizes, device["ceiling"]["gbps"])

    def _baseline_request(self, family: Family, sizes: dict[str, int]) -> dict | None:
        want_torch = bool(self.options.torch and self.options.time and family.torch)
        if want_torch and importlib.util.find_spec("torch") is None:
            want_torch = False
        want_copy = self.options.time and not family.flops
        if not (want_torch or want_copy):
            return None
        req = {"family": family.name, "torch": want_torch, "copy_bytes": family.bytes_moved(sizes) if want_copy else 0}
        if want_torch:
            req["cases"] = self.cases(family, sizes)[:1]
        return req

    def _finish_baselines(self, family: Family, sizes: dict[str, int], req: dict | None, res: dict) -> dict:
        out: dict = {"torch": None, "copy": None}
        if self.options.torch and self.options.time and family.torch and importlib.util.find_spec("torch") is None:
            out["torch"] = {"status": "unavailable", "reason": "torch is not installed"}
        if req is None:
            return out
        ceiling = self.device()["ceiling"]["gbps"]
        for key, wanted in (("torch", req["torch"]), ("copy", bool(req["copy_bytes"]))):
            if not wanted:
                continue
            part = res.get(key) or {"status": res.get("status", "crashed"), "reason": res.get("reason", "no result")}
            if part.get("status") == "passed":
                part.update(_bandwidth(family, sizes, part["timing"]["median_us"], ceiling))
            out[key] = part
        return out

    def prepare_baselines(self, families: list[Family]) -> None:
        """Every family's baselines in one child (torch is imported once), remembered for
        run_baselines; a family whose part did not come back is retried on its own."""
        reqs = {f.name: self._baseline_request(f, self.sizes_for(f)) for f in families}
        jobs = [r for r in reqs.values() if r]
        if not jobs:
            return
        self.device()
        self.progress(f"baselines for {len(jobs)} families (PyTorch and same-size copies)")
        res = run_job({"job": "baselines_all", "root": str(self.project.root), "budget": self.options.budget,
                       "flush": self.options.flush, "families": jobs}, self.options.timeout * len(jobs))
        for f in families:
            part = (res.get("families") or {}).get(f.name)
            if reqs[f.name] is None or part is not None:
                self._baselines[f.name] = self._finish_baselines(f, self.sizes_for(f), reqs[f.name], part or {})

    def run_baselines(self, family: Family, sizes: dict[str, int] | None = None) -> dict:
        """In one child process: the family's PyTorch equivalent, timed and checked like a version,
        and a plain copy of its bytes timed the same way (the practical ceiling at this size;
        skipped for compute-bound families, where it says nothing)."""
        sizes = sizes or self.sizes_for(family)
        if family.name in self._baselines and sizes == self.sizes_for(family):
            return self._baselines[family.name]
        req = self._baseline_request(family, sizes)
        if req is None:
            return self._finish_baselines(family, sizes, None, {})
        self.progress(f"{family.name}: baselines")
        res = run_job({"job": "baselines", "root": str(self.project.root), "budget": self.options.budget,
                       "flush": self.options.flush, **req}, self.options.timeout)
        return self._finish_baselines(family, sizes, req, res)

    def bench_family(self, family: Family, versions: list[Version] | None = None,
                     on_version: Callable[[dict], None] | None = None, baselines: bool = True) -> dict:
        """Every version of the family, then (unless baselines=False: see add_baselines) its
        PyTorch equivalent and a same-size copy, and the speedups."""
        import time
        started = time.perf_counter()
        sizes = self.sizes_for(family)
        out = {"family": family.name, "title": family.title, "sizes": sizes,
               "bytes": family.bytes_moved(sizes), "flops": family.flops_done(sizes), "versions": []}
        for version in versions or family.versions:
            res = self.run_version(version, sizes)
            out["versions"].append(res)
            if on_version:
                on_version(res)
        out["seconds"] = round(time.perf_counter() - started, 2)
        if baselines:
            self.add_baselines(family, out)
        return out

    def add_baselines(self, family: Family, out: dict) -> dict:
        out.update(self.run_baselines(family, out["sizes"]))
        speedups(out)
        return out

    def metadata(self) -> dict:
        dev = self.device()
        return {**dev, "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "commit": git_commit(), "options": asdict(self.options)}


def _build_cases(root: str, family_name: str, plan, folder: str) -> list[str]:
    """Draw inputs and run the reference for each (sizes, seed); save them for the workers."""
    family = Project(root).family(family_name)
    paths = []
    for i, (sizes, seed) in enumerate(plan):
        path = f"{folder}/{i}"
        save_case(make_case(family, sizes, seed), path)
        paths.append(path)
    return paths


def _build_cases_args(args) -> list[str]:
    return _build_cases(*args)


def _bandwidth(family: Family, sizes: dict[str, int], median_us: float, ceiling_gbps: float) -> dict:
    nbytes = family.bytes_moved(sizes)
    median_us = max(median_us, 1e-3)  # a timer tick: never divide by zero
    gbps = nbytes / (median_us * 1e-6) / 1e9
    flops = family.flops_done(sizes)
    out = {"gbps": gbps, "pct_ceiling": 100.0 * gbps / ceiling_gbps}
    if flops:
        out["tflops"] = flops / (median_us * 1e-6) / 1e12
    return out


def derive(res: dict, family: Family, sizes: dict[str, int], ceiling_gbps: float) -> dict:
    """Add bandwidth, % of ceiling and the best block size to a version's raw result."""
    res["sizes"] = sizes
    timings = res.get("timings") or {}
    for bs, t in timings.items():
        t.update(_bandwidth(family, sizes, t["median_us"], ceiling_gbps))
    if timings:
        best = min(timings, key=lambda b: timings[b]["median_us"])
        res["best_block_size"] = None if best == "None" else int(best)
        res["best"] = timings[best]
    return res


def speedups(fam: dict) -> None:
    """Speedup of each version against version 1 and against torch (same run, same sizes)."""
    timed = [v for v in fam["versions"] if v.get("best")]
    first = next((v for v in fam["versions"] if v.get("version") == min(
        (x.get("version", 0) for x in fam["versions"]), default=0) and v.get("best")), None)
    torch = fam.get("torch") or {}
    torch_us = torch.get("timing", {}).get("median_us") if torch.get("status") == "passed" else None
    for v in timed:
        us = v["best"]["median_us"]
        if first:
            v["speedup_vs_first"] = first["best"]["median_us"] / us
        if torch_us:
            v["speedup_vs_torch"] = torch_us / us
    if timed:
        fam["best_version"] = min(timed, key=lambda v: v["best"]["median_us"])["version"]


def git_commit() -> str | None:
    """The project's commit (WORKBENCH_COMMIT when the tree travelled without its .git)."""
    import os
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
