"""Isolation: run one GPU job in a child process, with a timeout, and never let it take us down.

A crash (illegal address, launch failure, segfault), a hang or an exception in the child comes
back as that job's result: {"status": "crashed" | "timed_out" | ..., "reason": "..."}.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .family import PROJECT_ROOT

DEFAULT_TIMEOUT = 120.0


def run_job(job: dict, timeout: float = DEFAULT_TIMEOUT) -> dict:
    with tempfile.TemporaryDirectory(prefix="workbench-job-") as tmp:
        req = Path(tmp) / "request.json"
        out = Path(tmp) / "result.json"
        req.write_text(json.dumps({**job, "result": str(out)}))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
        proc = subprocess.Popen([sys.executable, "-m", "workbench.worker", str(req)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, start_new_session=True)
        try:
            _, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            timed_out = True
        result = _read(out)
        if timed_out:
            phase = result.get("phase")
            result.update(status="timed_out",
                          reason=f"timed out after {timeout:g} s" + (f" (during {phase})" if phase else ""))
        elif result.get("status") in (None, "started"):
            result.update(status="crashed", reason=_crash_reason(proc.returncode, stderr, result.get("phase")))
        if stderr and result.get("status") not in ("passed",):
            result.setdefault("stderr", stderr[-4000:])
        return result


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _crash_reason(code: int | None, stderr: str, phase: str | None) -> str:
    if code is not None and code < 0:
        try:
            what = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            what = f"killed by signal {-code}"
    else:
        lines = [l for l in (stderr or "").strip().splitlines() if l.strip()]
        what = lines[-1] if lines else f"exited with status {code}"
    return what + (f" (during {phase})" if phase else "")
