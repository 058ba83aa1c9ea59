"""On the GPU: the daily loop. `run --watch` on a copy of the project (a save runs the version
again and says how long from the save to the table; a compile error is shown and the watch goes
on; Ctrl-C ends it with status 0), and a second `run` reusing the baselines the first measured."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, Bounded, bounded, project_with

pytestmark = pytest.mark.gpu


def project_copy(tmp_path):
    project_with(tmp_path, "layernorm_forward")
    return tmp_path


def env_for(root, cache):
    return {**os.environ, "WORKBENCH_ROOT": str(root), "WORKBENCH_CACHE": str(cache), "COLUMNS": "200",
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}


class Lines:
    """A process's stdout and stderr, line by line, waited on with deadlines."""

    def __init__(self, proc):
        self.q, self.seen = queue.Queue(), []
        for stream in (proc.stdout, proc.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream):
        for line in stream:
            self.q.put(line)

    def wait_for(self, text, timeout, count):
        """The count-th line holding `text` since the start, which may have come already: stdout
        and stderr are read by two threads, so a line on one (watch's "watching", on stderr) can
        overtake a line the program wrote before it on the other (the report, on stdout)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.seen if text in line]
            if len(found) >= count:
                return found[count - 1]
            if time.monotonic() >= deadline:
                raise AssertionError(f"no {text!r} within {timeout} s; output so far:\n{''.join(self.seen)[-4000:]}")
            try:
                self.seen.append(self.q.get(timeout=0.2))
            except queue.Empty:
                pass


def test_watch_runs_again_on_each_save_and_survives_a_compile_error(tmp_path):
    root = project_copy(tmp_path / "project")
    source = next((root / "kernels" / "layernorm_forward").glob("4_*.cu"))
    p = Bounded([sys.executable, "-m", "workbench", "run", "layernorm_forward", "4", "--watch", "--no-torch"],
                env_for(root, tmp_path / "cache"), stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=root)
    try:
        lines = Lines(p.proc)
        lines.wait_for("first run: best", 180, count=1)
        lines.wait_for("watching", 30, count=1)
        source.write_text(source.read_text() + "\n// an edit\n")
        line = lines.wait_for("saved 4_", 60, count=1)
        assert "s from the save to this table" in line
        lines.wait_for("watching", 30, count=2)
        good = source.read_text()
        source.write_text(good.replace("float m = sum / C;", "float m = sum / C"))
        lines.wait_for("does not compile", 60, count=1)
        lines.wait_for("watching", 30, count=3)
        source.write_text(good + "\n// mended\n")
        lines.wait_for("saved 4_", 60, count=2)
        p.proc.send_signal(signal.SIGINT)
        code, _, _ = p.wait(30)
        assert code == 0
    finally:
        p.kill()


def test_a_second_run_reuses_the_baselines_and_says_so(tmp_path):
    root = project_copy(tmp_path / "project")
    env = env_for(root, tmp_path / "cache")
    cmd = [sys.executable, "-m", "workbench", "run", "layernorm_forward", "4"]
    first = bounded(cmd, 300, env=env, cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "torch F.layer_norm" in first.stdout and "reused" not in first.stdout
    second = bounded(cmd, 300, env=env, cwd=root)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "reused; --fresh-baselines measures again" in second.stdout
    third = bounded([*cmd, "--fresh-baselines"], 300, env=env, cwd=root)
    assert third.returncode == 0 and "reused" not in third.stdout


PRECOMPILE = """
from workbench.bench import Session
from workbench.compile import arch_of_device, is_cached
from workbench.compiles import harness_sources
from workbench.family import Project
from workbench.options import Options
v = Project().family("layernorm_forward").version(4)
with Session(Project(), Options(torch=False)) as s:
    s.compiles.start_ahead([v])
    errors = [f.result(timeout=120) for f in list(s.compiles._futures.values())]
    assert errors == [None] * 7, errors
    s.device()  # the probe, kept for this machine: the next session knows the arch without asking
arch = arch_of_device()
assert is_cached(v.path, arch) and all(is_cached(None, arch, src) for src in harness_sources())
with Session(Project(), Options(torch=False)) as s:
    s.compiles.start_ahead([v])
    assert s.compiles._pool is None, "started compiles where everything was cached"
print("precompiled", 1 + len(harness_sources()))
"""


def test_a_fresh_machine_compiles_the_version_and_the_harness_kernels_ahead(tmp_path):
    """No probe kept, nothing cached (a fresh machine): a run's version and the harness kernels
    its children load are compiled in the pool, for the arch the pool asks the driver for, into
    the cache the children read; once cached (and the probe kept), nothing is started."""
    r = bounded([sys.executable, "-c", PRECOMPILE], 180, env=env_for(ROOT, tmp_path / "cache"), cwd=ROOT)
    assert r.returncode == 0 and "precompiled 7" in r.stdout, r.stdout[-2000:] + r.stderr[-4000:]


WARM = """
import time
from workbench.worker import init_cuda
from workbench.family import Project
from workbench.providers import warm_torch
init_cuda()
import torch
torch.cuda.init()
project = Project()
for f in project.families():
    for p in f.precision_names():
        if f.torch_expression(p):
            t0 = time.perf_counter()
            warm_torch(f, p)
            print(f"warmed {f.name} {p} {time.perf_counter() - t0:.3f}", flush=True)
"""


def test_every_torch_expression_warms_at_its_smallest_test_size(tmp_path):
    """The baselines' child swallows a warm-up's error (the baseline's check reports it); here
    every family's torch expression must run on its drawn inputs at its smallest test size."""
    from workbench.family import Project
    project = Project(ROOT)
    groups = [(f.name, p) for f in project.families() for p in f.precision_names() if f.torch_expression(p)]
    r = bounded([sys.executable, "-c", WARM], 300, env=env_for(ROOT, tmp_path / "cache"), cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    warmed = [tuple(line.split()[1:3]) for line in r.stdout.splitlines() if line.startswith("warmed ")]
    assert warmed == groups
