"""Run `workbench run ...` with every interesting call timed (stderr)."""
import sys, time, functools
T0 = time.perf_counter()
def stamp(msg): sys.stderr.write(f"[{time.perf_counter()-T0:7.3f}] {msg}\n"); sys.stderr.flush()
stamp("start")
import workbench.cli.app as app
stamp("cli imported")
from workbench import bench, isolate, staged, cases, compiles, children, report
def wrap(obj, name, label):
    f = getattr(obj, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter(); stamp(f"> {label}")
        try: return f(*a, **k)
        finally: stamp(f"< {label} {time.perf_counter()-t:.3f}s")
    setattr(obj, name, g)
wrap(bench, "probe_device", "probe_device")
for n in ("new_run", "run_version", "run_baselines", "close"): wrap(bench.Session, n, "Session."+n)
for n in ("run", "close", "_spawn", "release", "settle", "start"): wrap(isolate.Server, n, "Server."+n)
for n in ("share", "close", "server"): wrap(staged.StagedCases, n, "Staged."+n)
for n in ("cases", "stop_pool", "remove_folder", "stop_deleting"): wrap(cases.CaseStore, n, "Cases."+n)
for n in ("wait_for", "close", "start"): wrap(compiles.Compiles, n, "Compiles."+n)
wrap(children.Children, "close", "Children.close")
wrap(report, "run_report", "run_report")
_rr = report.run_report
def _rr2(row, *a, **k):
    stamp(f"row phases {row.phases} seconds {row.seconds}")
    return _rr(row, *a, **k)
report.run_report = _rr2
from workbench import family, watch
wrap(family.Project, "reload", "Project.reload")
wrap(children.Children, "settle", "Children.settle")
wrap(watch, "wait_for_change", "wait_for_change")
import atexit; atexit.register(lambda: stamp("atexit"))
if __name__ == "__main__":
    sys.argv = ["workbench", *sys.argv[1:]]
    try:
        app.main()
    finally:
        stamp("main returned")
