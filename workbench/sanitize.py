"""Sanitize: every version under NVIDIA's compute-sanitizer, at the family's small test sizes.

For each version and each tool (memcheck: out-of-bounds and misaligned accesses; racecheck:
shared-memory hazards between threads; initcheck: reads of device memory nothing wrote;
synccheck: barriers not every thread reaches), the version's check job (no timing) runs in a
child process wrapped in `compute-sanitizer --tool T`. The sanitizer's own verdict is what
counts: its "ERROR SUMMARY" (or racecheck's hazard summary), with its first report lines kept.
Jobs run several at a time: a sanitized run is mostly host-side instrumentation.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

from .errors import WorkbenchError
from .family import Version
from .isolate import run_job

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
LIBRARY_KERNELS = ("cudnn", "xmma", "cutlass", "nvjet", "cublas")  # name fragments of cuDNN's and cuBLAS's kernels
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")
HAZARDS = re.compile(r"RACECHECK SUMMARY: (\d+) hazard")
REPORT_LINE = re.compile(r"^=========\s+(Invalid|Error|Race|Uninitialized|Barrier|Warning|.*hazard|.*Program hit)", re.I)
# The tool's own failure, e.g. racecheck of cuBLASLt's bf16 GEMM on the H100 (matmul_forward 6,
# three runs of three in 2026-11-25): "Internal Sanitizer Error: The Sanitizer failed to handle a
# hardware exception." It is counted in the error summary, but it says nothing of the kernel.
INTERNAL = re.compile(r"Internal Sanitizer Error:[^\n]*")
AT_LINE = re.compile(r"^=========\s+at\s+(.+?)\s*$")  # where the report above it happened: kernel+offset


@dataclass
class Finding:
    """One version under one tool."""

    version: Version
    tool: str
    status: str                  # "clean" | "errors" | "failed" (the job itself) | "timed_out"
    errors: int = 0
    lines: list[str] = field(default_factory=list)   # the sanitizer's first reports
    reason: str = ""


def sanitizer() -> str:
    path = shutil.which("compute-sanitizer")
    if path is None:
        for cand in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
            if os.path.exists(cand):
                return cand
        raise WorkbenchError("compute-sanitizer is not on PATH: it ships with the CUDA toolkit "
                             "(/usr/local/cuda/bin); add that folder to PATH")
    return path


def parse(output: str) -> tuple[int, list[str]]:
    """(errors, first report lines) from compute-sanitizer's output."""
    errors = 0
    if m := SUMMARY.search(output):
        errors = int(m.group(1))
    if m := HAZARDS.search(output):
        errors = max(errors, int(m.group(1)))
    lines: list[str] = []
    attach = False  # the line before was a report: an "at ..." line now says where it happened
    for line in output.splitlines():
        if (at := AT_LINE.match(line)) and attach:
            lines[-1] += f" (at {at.group(1)})"  # which kernel: ours, or a library's
        attach = bool(REPORT_LINE.match(line)) and "SUMMARY:" not in line  # the summaries are counted above
        if attach:
            lines.append(line.strip("= ").strip())
    if errors and not lines:  # a report of a kind not matched above: the sanitizer's own last words
        said = [ln.strip("= ").strip() for ln in output.splitlines()
                if ln.startswith("=========") and "SUMMARY" not in ln and ln.strip("= ").strip()]
        lines = said[-6:]
    return errors, lines[:6]


# The probe needs a program that makes a CUDA call: the sanitizer fails one that makes none
# ("terminated before first instrumented API call"), whatever its options.
PROBE = "import pycuda.driver as d; d.init(); d.Device(0).make_context().pop()"


@functools.lru_cache(maxsize=None)
def _accepts(cmd: tuple[str, ...]) -> bool:
    """Does this compute-sanitizer take these options? (run once, on a program that only makes
    a context)"""
    import subprocess
    import sys
    try:
        return subprocess.run([*cmd, sys.executable, "-c", PROBE], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def command(tool: str, leave_out_libraries: bool = True) -> list[str]:
    # API errors are not counted: cuDNN probes driver entry points that this driver lacks
    # (cuGetProcAddress answers "invalid argument"), by design; a failing call of ours fails the
    # job anyway. Kernels of NVIDIA's libraries (cuDNN's attention, cuBLAS's GEMMs) are left out:
    # racecheck and synccheck flag their asynchronous copies and barriers, and initcheck flags
    # cuBLASLt's split-K reduce (cublasLt::splitKreduce_kernel) reading workspace its GEMM kernel
    # never wrote (seen on the H100 at sgemm 5 and matmul_forward 4): none of it ours to fix.
    cmd = [sanitizer(), "--tool", tool, "--error-exitcode", "99", "--print-limit", "20",
           "--report-api-errors", "no"]
    if tool == "racecheck":
        cmd += ["--racecheck-report", "all"]
    if leave_out_libraries:
        for library in LIBRARY_KERNELS:
            cmd += ["--kernel-name-exclude", f"kns={library}"]
    return cmd


def usable_command(tool: str) -> list[str]:
    """command(tool), once this compute-sanitizer is known to take its options; an older one
    without the kernel filters still checks everything (the libraries' kernels too)."""
    for cmd in (command(tool), command(tool, leave_out_libraries=False)):
        if _accepts(tuple(cmd)):
            return cmd
    raise WorkbenchError(f"compute-sanitizer refused the options {' '.join(cmd[1:])}")


def sanitize(session, versions: list[Version], tools=TOOLS, parallel: int = 4, timeout: float = 600.0,
             on_finding: Callable[[Finding], None] | None = None) -> list[Finding]:
    """Run every (version, tool) pair, tool by tool (every version's memcheck first, so a run cut
    short has the most telling tool everywhere); returns the findings in that order."""
    from .compile import arch_of
    requests = {}
    for v in versions:
        sizes = v.family.test_sizes
        usable = [s for s in sizes if not v.unmet(s)]
        # A version that cannot run here keeps, instead of a job, why it is skipped.
        why = "no test size meets its preconditions" if not usable else \
            v.arch and v.arch_refusal(arch_of(session.device()))
        if why:
            requests[v.path] = why
            continue
        cases = session.store.cases(v.family, usable[0], v.precision, extra_sizes=usable[1:], seeds=1)
        requests[v.path] = {**session.request(v.family, usable[0], v.precision), "time": False,
                            "providers": [{"kind": "version", "version": v.number}], "cases": cases}
    jobs = [(v, tool, requests[v.path]) for tool in tools for v in versions]
    commands = {tool: usable_command(tool) for tool in tools}

    def one(job) -> Finding:
        v, tool, req = job
        if isinstance(req, str):
            return Finding(v, tool, "skipped", reason=req)
        res = run_job(req, timeout, prefix=commands[tool])
        out = (res.get("_stdout") or "") + "\n" + (res.get("stderr") or "")
        errors, lines = parse(out)
        if res.get("status") == "timed_out":
            return Finding(v, tool, "timed_out", errors, lines, res.get("reason", ""))
        rows = res.get("rows") or []
        if broke := INTERNAL.search(out):  # the sanitizer itself failed: no verdict on the code
            return Finding(v, tool, "failed", errors, lines, f"compute-sanitizer: {broke.group(0).strip()}")
        if errors:
            return Finding(v, tool, "errors", errors, lines)
        if res.get("status") != "passed" or not rows or rows[0].get("status") not in ("passed", "refused"):
            why = (rows[0].get("reason") if rows else None) or res.get("reason") or (rows[0].get("status") if rows else "")
            return Finding(v, tool, "failed", errors, lines, str(why))
        return Finding(v, tool, "clean")

    found: dict[int, Finding] = {}
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {pool.submit(one, job): i for i, job in enumerate(jobs)}
        for future in as_completed(futures):  # reported as they finish: a slow job holds up nothing
            found[futures[future]] = finding = future.result()
            if on_finding:
                on_finding(finding)
    return [found[i] for i in range(len(jobs))]


def to_json(findings: list[Finding], device: dict | None = None, tools=TOOLS, done: bool = True) -> dict:
    """The findings as a results file (`sanitize --json`), rewritten after each finding."""
    return {"workbench_sanitize": 1, "device": device or {}, "tools": list(tools), "complete": done,
            "findings": [{"family": f.version.family.name, "version": f.version.number,
                          "precision": f.version.precision, "tool": f.tool, "status": f.status,
                          "errors": f.errors, "lines": f.lines, "reason": f.reason} for f in findings]}
