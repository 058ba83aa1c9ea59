"""Profile: versions under Nsight Compute (ncu), their hardware counters side by side.

`workbench run` says how long a version takes; this says why. Each version runs in a child of
its own (the worker's "profile" job), wrapped in `ncu --profile-from-start off`: the child builds
one case at the timed sizes, loads the version, launches it once as a warm-up (library handles,
caches), then launches its plan once between cuProfilerStart and cuProfilerStop, so ncu profiles
exactly the version's kernels, its library calls' (cuBLAS, cuDNN) included, and none of the
workbench's own. ncu writes a report; `ncu --import` reads it back as CSV, twice: the raw page
(every metric of every kernel by name) and the details page (the rules' findings).

Under ncu the SM clock is locked to its base (1.58 GHz on the H100, against up to 1.98 GHz in
`run`) and the caches are flushed before each kernel, and each kernel runs alone: its durations
are longer than `run`'s and are for comparing versions with each other, not with `run`'s table.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .errors import NoGPU, WorkbenchError
from .family import Version
from .isolate import run_job

# The sections asked for: each brings its metrics and its rules.
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "SchedulerStats", "WarpStateStats")
# The raw page's names of what the table shows (ncu 2025.3, H100; SpeedOfLight's "Duration",
# "DRAM Throughput", "Compute (SM) Throughput", Occupancy's "Achieved Occupancy", LaunchStats'
# "Registers Per Thread", MemoryWorkloadAnalysis' "L2 Hit Rate").
DURATION = "gpu__time_duration.sum"
DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
REGISTERS = "launch__registers_per_thread"
L2_HIT_PCT = "lts__t_sector_hit_rate.pct"
SM_CLOCK = "gpc__cycles_elapsed.max.per_second"
# WarpStateStats: for each reason, the cycles a warp spends stalled on it per issued instruction;
# together (with "selected", the cycle it issues) they make up the cycles between two issues.
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
CYCLES_PER_ISSUE = "smsp__average_warp_latency_per_inst_issued.ratio"
NOT_A_STALL = {"selected"}
TOP_STALLS = 3
SHOWN_RULE_TYPES = ("ERR", "WRN", "OPT")  # INF rules are notes, kept in the JSON only
TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
TO_GHZ = {"hz": 1e-9, "khz": 1e-6, "mhz": 1e-3, "ghz": 1.0}
NO_PERMISSION = "ERR_NVGPUCTRPERM"
DEFAULT_TIMEOUT = 300.0


class CountersNotPermitted(WorkbenchError):
    """The driver keeps the GPU's performance counters from this user."""


# -- ncu itself ------------------------------------------------------------------------------------
def find_ncu() -> str:
    """ncu's path; one line saying where to get it when it is not on PATH."""
    path = shutil.which("ncu")
    if path is not None:
        return path
    near = [p for p in (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "ncu",
                        Path("/usr/local/cuda/bin/ncu")) if p.is_file()]
    where = (f"there is one at {near[0]}: add {near[0].parent} to PATH" if near else
             "it ships with the CUDA toolkit (its bin/ folder) and as Nsight Compute; install it and add its folder to PATH")
    raise WorkbenchError(f"ncu (Nsight Compute) is not on PATH: {where}")


def ncu_command(ncu: str, report: str | os.PathLike, log: str | os.PathLike, sections=SECTIONS) -> list[str]:
    """The prefix that runs a worker under ncu: only what lies between cuProfilerStart and Stop
    is profiled (--profile-from-start off), every kernel of it, each replayed once per pass with
    its memory restored; clocks locked to base and caches flushed before each kernel (ncu's
    defaults, spelled out); the report to `report`, ncu's own messages to `log`."""
    cmd = [ncu, "--profile-from-start", "off", "--target-processes", "all", "--replay-mode", "kernel",
           "--clock-control", "base", "--cache-control", "all", "--apply-rules", "yes",
           "--export", str(report), "--force-overwrite", "--log-file", str(log)]
    for section in sections:
        cmd += ["--section", section]
    return cmd


def import_command(ncu: str, report: str | os.PathLike, page: str) -> list[str]:
    """Read a report back as CSV: page "raw" (every metric by name) or "details" (sections and rules)."""
    return [ncu, "--import", str(report), "--csv", "--page", page]


def ncu_version(ncu: str) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Version\s+(\S+)", out)
    return m.group(1) if m else None


# -- what a kernel's profile holds ---------------------------------------------------------------------
@dataclass
class Stall:
    reason: str       # ncu's name: long_scoreboard, lg_throttle, barrier...
    cycles: float     # cycles a warp spends stalled on it per issued instruction
    share: float      # of all the cycles between two issues (%)


@dataclass
class Rule:
    name: str
    type: str         # OPT (an optimization), WRN, ERR, INF (a note)
    section: str
    text: str
    speedup: float | None = None   # ncu's estimate, % of the kernel's duration
    speedup_type: str = ""         # "local" (this part of the kernel) or "global" (the whole)

    def short(self, width: int = 110) -> str:
        """The rule's first sentence, cut to `width` characters."""
        first = re.split(r"(?<=[.!?])\s", self.text.strip(), maxsplit=1)[0]
        return first if len(first) <= width else first[:width - 1].rstrip() + "…"


@dataclass
class KernelProfile:
    name: str
    grid: str = ""
    block: str = ""
    duration_us: float | None = None
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: int | None = None
    l2_hit_pct: float | None = None
    sm_clock_ghz: float | None = None
    stalls: list[Stall] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)


@dataclass
class VersionProfile:
    family: str
    version: int
    title: str
    block_size: int | None
    status: str = "profiled"      # or "no_kernels", "failed", "timed_out", "crashed"
    reason: str = ""
    kernels: list[KernelProfile] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)
    resources: dict = field(default_factory=dict)   # ptxas's report per kernel (compile.Resources)
    device: dict = field(default_factory=dict)      # the GPU, as the child found it

    @property
    def label(self) -> str:
        return f"{self.family} {self.version}"

    @property
    def duration_us(self) -> float | None:
        times = [k.duration_us for k in self.kernels if k.duration_us is not None]
        return sum(times) if times else None

    def to_json(self) -> dict:
        return {**asdict(self), "duration_us": self.duration_us}


# -- reading ncu's CSV -----------------------------------------------------------------------------------
def number(text: str) -> float | str | None:
    """A CSV cell: '1,024' -> 1024.0, '20.896000' -> 20.896, '' -> None, a word stays a word."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def _scaled(metrics: dict, name: str, scale: dict[str, float]) -> float | None:
    value, unit = metrics.get(name, (None, ""))
    if not isinstance(value, float):
        return None
    return value * scale.get(unit.lower(), 1.0)  # a unit not listed: taken as the one wanted


def _plain(metrics: dict, name: str) -> float | None:
    value = metrics.get(name, (None, ""))[0]
    return value if isinstance(value, float) else None


def parse_raw(text: str) -> list[dict]:
    """The raw page: a header row, a units row, one row per kernel. Each kernel as {"id", "name",
    "grid", "block", "metrics": {metric: (value, unit)}}."""
    rows = list(csv.reader(io.StringIO(text)))
    start = next((i for i, r in enumerate(rows) if r[:1] == ["ID"]), None)
    if start is None or len(rows) < start + 2:
        return []
    header, units = rows[start], rows[start + 1]
    kernels = []
    for row in rows[start + 2:]:
        if len(row) != len(header):
            continue
        cells = dict(zip(header, row))
        kernels.append({"id": cells["ID"], "name": cells.get("Kernel Name", ""), "grid": cells.get("Grid Size", ""),
                        "block": cells.get("Block Size", ""),
                        "metrics": {h: (number(v), u) for h, u, v in zip(header, units, row)}})
    return kernels


def parse_rules(text: str) -> dict[str, list[Rule]]:
    """The details page's rule rows (those with a Rule Name), by kernel ID."""
    rules: dict[str, list[Rule]] = {}
    body = text[text.find('"ID"'):] if '"ID"' in text else text
    for row in csv.DictReader(io.StringIO(body)):
        if not (row.get("Rule Name") or "").strip():
            continue
        speedup = number(row.get("Estimated Speedup") or "")
        rules.setdefault(row["ID"], []).append(Rule(
            row["Rule Name"], (row.get("Rule Type") or "").strip(), row.get("Section Name") or "",
            (row.get("Rule Description") or "").strip(), speedup if isinstance(speedup, float) else None,
            (row.get("Estimated Speedup Type") or "").strip()))
    return rules


def stalls(metrics: dict, top: int = TOP_STALLS) -> list[Stall]:
    """The `top` reasons warps waited on, most cycles first (WarpStateStats)."""
    found = {}
    for name, (value, _) in metrics.items():
        m = STALL.match(name)
        if m and isinstance(value, float):
            found[m.group(1)] = value
    total = _plain(metrics, CYCLES_PER_ISSUE) or sum(found.values())
    ranked = sorted(((r, c) for r, c in found.items() if r not in NOT_A_STALL and c > 0), key=lambda x: -x[1])
    return [Stall(r, c, 100.0 * c / total if total else 0.0) for r, c in ranked[:top]]


def kernels_from(raw: str, details: str) -> list[KernelProfile]:
    """Every kernel of a report, in launch order, from its raw and details pages."""
    rules = parse_rules(details)
    out = []
    for k in parse_raw(raw):
        m = k["metrics"]
        registers = _plain(m, REGISTERS)
        out.append(KernelProfile(
            k["name"], k["grid"], k["block"], duration_us=_scaled(m, DURATION, TO_US), dram_pct=_plain(m, DRAM_PCT),
            sm_pct=_plain(m, SM_PCT), occupancy_pct=_plain(m, OCCUPANCY_PCT),
            registers=int(registers) if registers is not None else None, l2_hit_pct=_plain(m, L2_HIT_PCT),
            sm_clock_ghz=_scaled(m, SM_CLOCK, TO_GHZ), stalls=stalls(m), rules=rules.get(k["id"], [])))
    return out


# -- running it ------------------------------------------------------------------------------------------
def block_size_for(version: Version, block_size: int | None) -> int | None:
    """The block size asked for, else the header's first (its preferred one)."""
    return block_size if block_size is not None else version.block_sizes[0]


def profile_version(root: Path, version: Version, sizes: dict[str, int], block_size: int | None, ncu: str,
                    seed: int = 0, timeout: float = DEFAULT_TIMEOUT) -> VersionProfile:
    """One version under ncu in a child of its own; CountersNotPermitted and NoGPU end the whole
    profile (every other version would fail the same way), anything else is this version's."""
    bs = block_size_for(version, block_size)
    out = VersionProfile(version.family.name, version.number, version.title, bs)
    with tempfile.TemporaryDirectory(prefix="workbench-ncu-") as tmp:
        report, log = Path(tmp) / "profile.ncu-rep", Path(tmp) / "ncu.log"
        job = {"job": "profile", "root": str(root), "family": version.family.name, "version": version.number,
               "sizes": dict(sizes), "block_size": bs, "seed": seed}
        res = run_job(job, timeout, prefix=ncu_command(ncu, report, log))
        said = (log.read_text(errors="replace") if log.exists() else "") + (res.get("stderr") or "") + \
            (res.get("_stdout") or "")
        if NO_PERMISSION in said:
            raise CountersNotPermitted(
                "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or let "
                "every user read them (nvidia driver option NVreg_RestrictProfilingToAdminUsers=0); "
                "https://developer.nvidia.com/ERR_NVGPUCTRPERM")
        if res.get("status") == "no_gpu":
            raise NoGPU(f"{res['reason']}. The workbench needs an NVIDIA GPU with a working driver")
        out.launches, out.resources, out.device = res.get("launches", []), res.get("resources", {}), res.get("device", {})
        if res.get("status") != "passed":
            errors = [ln.strip() for ln in said.splitlines() if ln.startswith("==ERROR==")]
            out.status, out.reason = res.get("status", "failed"), "; ".join([res.get("reason", ""), *errors[:2]]).strip("; ")
            return out
        if not report.exists():
            out.status, out.reason = "no_kernels", "ncu profiled no kernel (the plan launched only memsets?)"
            return out
        pages = [_import(ncu, report, page, timeout) for page in ("raw", "details")]
        out.kernels = kernels_from(*pages)
        if not out.kernels:
            out.status, out.reason = "no_kernels", "ncu's report holds no kernel"
    return out


def _import(ncu: str, report: Path, page: str, timeout: float) -> str:
    try:
        done = subprocess.run(import_command(ncu, report, page), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise WorkbenchError(f"ncu --import {report.name} --page {page} took over {timeout:g} s") from None
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        raise WorkbenchError(f"ncu --import --page {page} failed: {last[-1] if last else done.returncode}")
    return done.stdout


def profile_versions(root: Path, versions: list[Version], sizes: dict[str, int], block_size: int | None,
                     seed: int = 0, timeout: float = DEFAULT_TIMEOUT,
                     on_version: Callable[[Version], None] | None = None) -> list[VersionProfile]:
    ncu = find_ncu()
    found = []
    for v in versions:
        if on_version:
            on_version(v)
        found.append(profile_version(root, v, sizes, block_size, ncu, seed, timeout))
    return found


def to_json(profiles: list[VersionProfile], sizes: dict, ncu: str | None = None) -> dict:
    clocks = sorted({round(k.sm_clock_ghz, 2) for p in profiles for k in p.kernels if k.sm_clock_ghz})
    device = next((p.device for p in profiles if p.device), {})
    return {"workbench_profile": 1, "ncu": ncu, "device": device, "sizes": dict(sizes), "clock_control": "base",
            "sm_clock_ghz": clocks, "sections": list(SECTIONS), "versions": [p.to_json() for p in profiles]}
