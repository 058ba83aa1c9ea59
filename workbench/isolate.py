"""Isolation: run GPU jobs in child processes, with a timeout, and never let one take us down.

A crash (illegal address, launch failure, segfault), a hang or an exception in the child comes
back as that job's result: {"status": "crashed" | "timed_out" | ..., "reason": "..."}.

* `run_job` starts a fresh child for one job: what every version gets, so one version's broken
  context or corrupted memory cannot touch the next one.
* `Server` runs jobs through children it keeps: one long-lived child (the baselines: torch loads
  once per bench), or a fresh child per job started ahead of time (the versions); a job that
  crashes or hangs its child is reported the same way, and the next job gets a new child.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .family import PROJECT_ROOT

DEFAULT_TIMEOUT = 120.0


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    return env


def _write_request(tmp: str, job: dict) -> tuple[Path, Path]:
    req, out = Path(tmp) / "request.json", Path(tmp) / "result.json"
    req.write_text(json.dumps({**job, "result": str(out)}))
    return req, out


def run_job(job: dict, timeout: float = DEFAULT_TIMEOUT, prefix: list[str] | None = None) -> dict:
    """One job in a fresh child; `prefix` wraps the command (e.g. compute-sanitizer)."""
    with tempfile.TemporaryDirectory(prefix="workbench-job-") as tmp:
        req, out = _write_request(tmp, job)
        proc = subprocess.Popen([*(prefix or []), sys.executable, "-m", "workbench.worker", str(req)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=_env(), start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            timed_out = True
        result = _finish(_read(out), timed_out, timeout, proc.returncode, stderr)
        result["_stdout"] = stdout
        return result


class Server:
    """Children running jobs one at a time (`python -m workbench.worker --serve`).

    jobs_per_child None: one long-lived child (the baselines: torch loads once). 1: a fresh child
    for every job, as isolated as run_job; with `standby` N, N children are kept started ahead,
    so a child's interpreter, imports and CUDA context are ready when its job comes (a bench runs
    ~150 versions, most done in under a second: a start-up of ~1 s each, paid in sequence or by
    one child ahead, would hold the GPU idle); with `linger` N, a child done with its one job is
    not waited for but kept idle, and `release` (or the N-th such child) lets them all go at once.
    A job that crashes or hangs its child is reported like run_job's, and the next job gets a new
    child."""

    def __init__(self, jobs_per_child: int | None = None, standby: int = 0, preload: tuple[str, ...] = (),
                 linger: int = 0):
        self.jobs_per_child, self.standby, self.preload = jobs_per_child, int(standby), tuple(preload)
        self.linger = int(linger)
        self.proc: subprocess.Popen | None = None
        self._ahead: list[subprocess.Popen] = []   # started, not yet given a job (jobs_per_child == 1)
        self._lingering: list[subprocess.Popen] = []  # done with their one job, not yet let go (release)
        self._leaving: list[subprocess.Popen] = []    # let go, their exits not yet waited for (settle)
        # A child let go without waiting (close(wait=False)) may still be writing into its folder
        # while the folder is removed: what it leaves is not worth a traceback at the session's end.
        self._tmp = tempfile.TemporaryDirectory(prefix="workbench-server-", ignore_cleanup_errors=True)
        self._n = 0
        self._said = b""  # what the current child wrote on stdout besides its answers (heard)

    def _spawn(self) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "workbench.worker", "--serve"]
        if self.jobs_per_child:
            cmd.append(str(self.jobs_per_child))
        if self.preload:
            cmd += ["--preload", ",".join(self.preload)]
        # stderr to a file, not a pipe: a child that writes much would block on a full pipe
        self._n += 1
        err = open(Path(self._tmp.name) / f"stderr-{self._n}", "w+")
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                env=_env(), start_new_session=True)
        proc.err_file = err  # type: ignore[attr-defined]
        return proc

    @staticmethod
    def _stderr(proc) -> str:
        proc.err_file.seek(0)
        text = proc.err_file.read()
        proc.err_file.close()
        return text

    def start(self) -> "Server":
        """Start the child now, and the ones kept ahead (their imports and contexts then overlap
        whatever the caller does next)."""
        self._child()
        while len(self._ahead) < self.standby:
            self._ahead.append(self._spawn())
        return self

    def _child(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self._ahead = [p for p in self._ahead if p.poll() is None]
            self.proc = self._ahead.pop(0) if self._ahead else self._spawn()
            self._said = b""
        return self.proc

    def heard(self, line: str) -> bool:
        """Whether the long-lived child has written this line of its own accord (worker.serve
        writes "ready" once its preloads and warm-ups are done), read without waiting; False
        before the child is started."""
        proc = self.proc
        if proc is None:
            return False
        while proc.poll() is None and select.select([proc.stdout], [], [], 0)[0]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            self._said += chunk
        return f"\n{line}\n".encode() in b"\n" + self._said

    def run(self, job: dict, timeout: float = DEFAULT_TIMEOUT) -> dict:
        self._n += 1
        folder = Path(self._tmp.name) / str(self._n)
        folder.mkdir()
        req, out = _write_request(str(folder), job)
        self.settle()  # no job runs beside children tearing their contexts down
        sent = time.monotonic()
        try:
            proc = self._child()
            proc.stdin.write(f"{req}\n".encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):  # it was on its way out (after a crash): start another
            self.proc = None
            proc = self._child()
            proc.stdin.write(f"{req}\n".encode())
            proc.stdin.flush()
        if self.jobs_per_child == 1:  # this child is spoken for: the next job takes one started ahead
            self.proc = None
            while len(self._ahead) < self.standby:
                self._ahead.append(self._spawn())
        deadline = time.monotonic() + timeout
        answered = timed_out = False
        seen = b""
        while not answered:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:  # end of file: the child died
                    break
                seen += chunk
                # the answer is a line "done"; anything else a library printed is not
                answered = b"\ndone\n" in b"\n" + seen
        answered_at = time.monotonic()
        # a "ready" written while the job ran (heard); the answer is not something it said
        self._said += b"".join(line + b"\n" for line in seen.split(b"\n")[:-1] if line != b"done")
        stderr = ""
        raw = _read(out)
        # A child done with its one job is waited for, or kept (linger) and let go with others:
        # letting it tear its CUDA context down while the next version works made the checks and
        # baselines slower on the H100 (+21 s in a bench --all), and waiting for each costs ~0.13 s.
        if answered and self.jobs_per_child == 1 and self.linger and raw.get("status") != "crashed":
            self._lingering.append(proc)  # idle, its context alive, until release()
            if proc is self.proc:
                self.proc = None
            if len(self._lingering) >= self.linger:
                self.release()
        elif not answered or self.jobs_per_child == 1:  # hung, died, or done with its one job
            if timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
            if answered:
                _let_go(proc)
            proc.wait()
            stderr = self._stderr(proc)
            if proc is self.proc:
                self.proc = None
        elif proc.poll() is not None:  # answered, then exited (it does after a crashed context)
            self.proc = None
        result = _finish(raw, timed_out, timeout, proc.returncode if not answered else 0, stderr)
        # the parent's side of the hand-off (bench.py names where a version's seconds went)
        result["clock"] = {"sent": sent, "answered": answered_at, "exited": time.monotonic()}
        return result

    def release(self, wait: bool = True) -> None:
        """Let every lingering child go at once: their CUDA teardowns run side by side. With
        wait=False they are waited for later (settle: the next job waits for them first), so the
        caller's work that times nothing overlaps them."""
        procs, self._lingering = self._lingering, []
        for proc in procs:
            _let_go(proc)
        self._leaving += procs
        if wait:
            self.settle()

    def settle(self) -> None:
        """Wait for the children let go to have ended."""
        procs, self._leaving = self._leaving, []
        for proc in procs:
            proc.wait()
            proc.err_file.close()

    def close(self, wait: bool = True) -> None:
        """Let every child go. wait=False, at the end of a session (nothing is timed after it):
        the children's exits and CUDA teardowns are not waited for, and a child that never got a
        job is killed rather than asked (it may still be starting)."""
        self.release(wait=wait)
        for proc in [self.proc, *self._ahead]:
            if proc is not None and proc.poll() is None:
                if not wait and proc is not self.proc:
                    os.killpg(proc.pid, signal.SIGKILL)
                    continue
                _let_go(proc)
                if not wait:
                    continue
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
        self.proc = None
        self._ahead = []
        self._tmp.cleanup()


def _let_go(proc: subprocess.Popen) -> None:
    """Tell a serving child to end: an "exit" line, then stdin closed. The line, not the end of
    file alone: a process forked from ours after the child started (the bench's compile and
    reference pools) holds a copy of the pipe's write end, so the child would never see the end."""
    try:
        if not proc.stdin.closed:
            proc.stdin.write(b"exit\n")
            proc.stdin.flush()
            proc.stdin.close()
    except OSError:  # it has gone already
        pass


def _finish(result: dict, timed_out: bool, timeout: float, code: int | None, stderr: str) -> dict:
    if timed_out:
        phase = result.get("phase")
        result.update(status="timed_out", reason=f"timed out after {timeout:g} s" + (f" (during {phase})" if phase else ""))
    elif result.get("status") in (None, "started"):
        result.update(status="crashed", reason=_crash_reason(code, stderr, result.get("phase")))
    if stderr and result.get("status") != "passed":
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
        lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
        what = lines[-1] if lines else f"exited with status {code}"
    return what + (f" (during {phase})" if phase else "")
