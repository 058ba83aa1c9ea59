"""The child process: everything that touches the GPU for one job runs here.

An illegal address or a launch failure poisons a CUDA context for the rest of its process, so
each version is checked and timed in a process of its own; `isolate.py` starts it, enforces the
timeout and turns a crash into that version's result. Baselines (PyTorch, a plain copy) run in
one long-lived child (`--serve`), so torch is imported once per bench, not once per family.

    python -m workbench.worker REQUEST.json      one job
    python -m workbench.worker --serve [N]       jobs by request path, one per stdin line (N at most)

A job writes its result (and, as it goes, its progress) to the path named in the request.
Jobs: "rows" (check and time providers of one family: providers.py), "probe" (the device and its
copy ceiling), "peaks" (matmul ceilings), "stage" (the case owner's), "profile" (one launch of a
version for ncu: profile.py).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np


class Reporter:
    """Writes the result file as a job goes, so a timeout still says how far it got.

    A phase is written at once when the last write is EVERY seconds old; otherwise a timer writes
    it EVERY seconds later (a check runs ~100 phases a second, and a write each cost ~1 ms on the
    H100 host). A launch that hangs blocks only the main thread (PyCUDA lets the GIL go while it
    waits), so the timer still writes the phase it hung in. `refresh` (set by the job) brings the
    result up to date just before each write."""

    EVERY = 0.1

    def __init__(self, path: str):
        self.path = Path(path)
        self.result: dict[str, Any] = {"status": "started", "phase": "starting"}
        self.refresh: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._written = 0.0
        self._timer: threading.Timer | None = None

    def phase(self, text: str) -> None:
        self.result["phase"] = text
        if time.monotonic() - self._written >= self.EVERY:
            self.flush()
        elif self._timer is None:
            self._timer = threading.Timer(self.EVERY, self._late)
            self._timer.daemon = True
            self._timer.start()

    def _late(self) -> None:
        self._timer = None
        try:
            self.flush()
        except (RuntimeError, ValueError):  # the main thread changed the result mid-write: it writes again
            pass

    def flush(self) -> None:
        with self._lock:
            if self.refresh is not None:
                self.refresh()
            tmp = self.path.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(self.result, default=_jsonable))
            tmp.replace(self.path)
            self._written = time.monotonic()


def _jsonable(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if hasattr(x, "to_json"):
        return x.to_json()
    return str(x)


def cuda_message(e: BaseException) -> str:
    """'cuCtxSynchronize failed: an illegal memory access was encountered' -> the reason alone."""
    text = str(e).strip()
    return text.split("failed: ", 1)[-1] if "failed: " in text else text


_DEVICE: dict | None = None


def init_cuda() -> dict:
    global _DEVICE
    if _DEVICE is not None:
        return _DEVICE
    import pycuda.autoprimaryctx  # noqa: F401  (the primary context: cuBLAS, cuDNN and torch share it)
    import pycuda.driver as drv
    dev = drv.Context.get_device()
    major, minor = dev.compute_capability()
    a = drv.device_attribute
    try:  # the kernel module's version, as nvidia-smi shows it
        import re
        m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", open("/proc/driver/nvidia/version").readline())
        driver_version = m.group(1) if m else None
    except OSError:
        driver_version = None
    _DEVICE = {"name": dev.name(), "pci": dev.pci_bus_id(), "compute_capability": f"{major}.{minor}",
               "driver_version": driver_version,
               "sms": dev.get_attribute(a.MULTIPROCESSOR_COUNT), "l2_bytes": dev.get_attribute(a.L2_CACHE_SIZE),
               "memory_bytes": dev.total_memory(), "driver": drv.get_driver_version(),
               "cuda": ".".join(map(str, drv.get_version())), "clock_mhz": dev.get_attribute(a.CLOCK_RATE) // 1000}
    return _DEVICE


def _provider(spec: dict, family, block_sizes):
    from . import providers
    if spec["kind"] == "version":
        return providers.VersionProvider(family.version(spec["version"]), block_sizes)
    if spec["kind"] == "torch":
        return providers.TorchProvider(family, spec.get("precision"))
    if spec["kind"] == "copy":
        return providers.CopyProvider(int(spec["bytes"]))
    raise ValueError(f"unknown provider {spec['kind']!r}")


def run_rows(req: dict, rep: Reporter) -> None:
    """Check and time each provider of the request, one after another, each its own row."""
    pointers, opened = _staged_pointers(req, rep)
    try:
        _run_rows(req, rep, pointers)
    finally:
        if opened is not None:
            opened.close()


def _staged_pointers(req: dict, rep: Reporter) -> tuple[dict, object | None]:
    """{path: {"in"/"exp": {name: (address, nbytes)}}} of the request's staged cases (their
    bundles opened through IPC), and what to close afterwards."""
    staged = req.get("staged")
    if not staged:
        return {}, None
    from .staging import Opened
    try:
        opened = Opened(staged)
    except Exception as e:  # the owner is gone, or IPC is refused here: upload the cases as before
        rep.result["staging"] = f"not used: {cuda_message(e)}"
        return {}, None
    rep.result["staging"] = "used"
    return opened.pointers, opened


def _run_rows(req: dict, rep: Reporter, pointers: dict) -> None:
    import pycuda.driver as drv

    from .check import load_case
    from .family import Project
    from .options import RowJob
    from .providers import run_row, shapes_for
    from .results import Row

    project = Project(req["root"])
    family = project.family(req["family"])
    rows: list[dict] = []
    rep.result["rows"] = rows
    cases = None
    for spec in req["providers"]:
        row = Row(kind=spec["kind"], family=family.name, version=spec.get("version"))
        rows.append(row.to_json())

        def refresh(row=row, at=len(rows) - 1) -> None:  # the row as it stands, when the result is written
            rows[at] = row.to_json()

        def report(text: str, row=row) -> None:
            row.phase = text
            rep.phase(f"{row.label}: {text}")
        rep.refresh = refresh

        t0 = time.perf_counter()
        provider = None
        try:
            report("compile" if spec["kind"] == "version" else "set up")
            provider = _provider(spec, family, req.get("block_sizes"))
            row.phases["load"] = time.perf_counter() - t0  # the module loaded (compiled), or torch set up
            row.title = provider.title
            if spec["kind"] == "version":
                row.resources = {k: r.__dict__ for k, r in provider.resources.items()}
                row.compiler_warnings = provider.warnings
            if spec["kind"] == "torch":
                import torch
                row.expression, row.library_version = provider.expression, torch.__version__
            options = RowJob.from_request(req, bytes=spec.get("bytes"))  # a copy baseline moves its own bytes
            if spec["kind"] == "copy":
                case, shapes = provider.case()
                row.phases["setup"] = time.perf_counter() - t0 - row.phases["load"]
                run_row(provider, family.name, [case], lambda c, s=shapes: s, options, report, row)
            else:
                if cases is None:
                    cases = [load_case(p) for p in req["cases"]]
                    for path, case in zip(req["cases"], cases):
                        case.staged = pointers.get(path)
                row.phases["setup"] = time.perf_counter() - t0 - row.phases["load"]  # the cases opened
                run_row(provider, family.name, cases, shapes_for(provider.args(), family.env), options, report, row)
                row.sizes = cases[0].sizes
        except drv.Error:
            raise  # the context is gone: the job crashed (isolate.py reports it)
        except ImportError as e:
            row.status, row.reason = "unavailable", f"{e.name or e} is not installed"
        except Exception as e:  # this row's error, not the job's: the next provider still runs
            from .errors import WorkbenchError
            if isinstance(e, WorkbenchError):
                row.status = "compile_error" if type(e).__name__ == "CompileError" else "error"
                row.reason = str(e)
            else:
                row.status, row.reason = "error", f"{type(e).__name__}: {e}"
                row.stderr = traceback.format_exc()[-4000:]
        finally:
            if provider is not None:
                provider.close()
        row.seconds = round(time.perf_counter() - t0, 3)
        rows[-1] = row.to_json()
        rep.flush()
        if spec["kind"] == "torch" and "torch" in sys.modules:
            sys.modules["torch"].cuda.empty_cache()  # a long-lived child keeps no tensors between jobs
    rep.result["status"] = "passed"


def run_probe(req: dict, rep: Reporter) -> None:
    from .timing import cached_peaks, copy_ceiling
    rep.phase("measuring the copy ceiling")
    rep.result["ceiling"] = copy_ceiling(refresh=req.get("refresh", False))
    rep.result["peaks"] = cached_peaks()
    rep.result["status"] = "passed"


def run_peaks(req: dict, rep: Reporter) -> None:
    from .timing import matmul_peak
    rep.result["peaks"] = {}
    for kind in req.get("kinds", ("fp32", "tf32", "bf16")):
        rep.phase(f"measuring the {kind} matmul peak")
        rep.result["peaks"][kind] = matmul_peak(kind, refresh=req.get("refresh", False))
    rep.result["status"] = "passed"


def run_profile(req: dict, rep: Reporter) -> None:
    """One version at one size set and block size, launched once as a warm-up, then once between
    cuProfilerStart and cuProfilerStop: what `ncu --profile-from-start off` (profile.py, wrapping
    this child) profiles is exactly the version's kernels and library calls. Its inputs are the
    check's (same seed), its outputs poisoned; nothing is compared (`run` checks)."""
    import ctypes

    import pycuda.driver as drv

    from .check import Case, make_inputs
    from .family import Project
    from .providers import CaseBuffers, VersionProvider, shapes_for
    version = Project(req["root"]).family(req["family"]).version(req["version"])
    sizes, block = dict(req["sizes"]), req.get("block_size")
    rep.phase("compile")
    provider = VersionProvider(version, [block])
    rep.result["resources"] = {k: r.__dict__ for k, r in provider.resources.items()}
    rep.phase("inputs")
    inputs = make_inputs(version.family, sizes, int(req.get("seed", 0)), version.precision)
    case = Case(sizes, int(req.get("seed", 0)), inputs, {}, version.precision)
    bufs = CaseBuffers(provider.args(), shapes_for(provider.args(), version.family.env)(case), case)
    try:
        bufs.with_scratch(provider.scratch(sizes, block))
        plan, _ = provider.prepare(bufs, block)
        rep.result["launches"] = provider.described()
        stream = drv.Stream()
        rep.phase("warm-up launch")
        bufs.reset()
        plan(stream)
        stream.synchronize()
        bufs.reset()  # the profiled launch starts from the state the warm-up did
        drv.Context.synchronize()
        rep.phase("profiled launch")
        cuda = ctypes.CDLL("libcuda.so.1")  # the driver PyCUDA uses: its current context
        if cuda.cuProfilerStart() != 0:
            raise RuntimeError("cuProfilerStart failed")
        plan(stream)
        stream.synchronize()
        cuda.cuProfilerStop()
    finally:
        bufs.free()
        provider.close()
    rep.result["status"] = "passed"


# The case owner's staged cases (staging.py): a long-lived child of its own.
_STAGE = None


def run_stage(req: dict, rep: Reporter) -> None:
    """Upload a family's cases once ("stage"), check them after a version ("verify": what changed
    is uploaded again and named), or free them ("release")."""
    global _STAGE
    from .family import Project
    from .staging import Stage
    if _STAGE is None:
        _STAGE = Stage()
    if req["action"] == "stage":
        rep.phase(f"staging {len(req['cases'])} cases of {req['family']}")
        family = Project(req["root"]).family(req["family"])
        rep.result["staged"] = _STAGE.stage(req["cases"], family, req["precision"])
    elif req["action"] == "verify":
        rep.result["changed"] = _STAGE.verify(req["cases"])
    else:
        _STAGE.release(req.get("cases"))
    rep.result["status"] = "passed"


JOBS = {"rows": run_rows, "probe": run_probe, "peaks": run_peaks, "stage": run_stage, "profile": run_profile}


def run_request(path: str) -> None:
    req = json.loads(Path(path).read_text())
    rep = Reporter(req["result"])
    rep.result["pid"] = os.getpid()  # which child ran it (a staged case lives as long as its owner)
    rep.result["began"] = time.monotonic()  # the system's clock, as the parent's (bench: the hand-offs)
    t0 = time.perf_counter()
    try:
        try:
            rep.result["device"] = init_cuda()
        except ImportError as e:
            rep.result.update(status="no_gpu", reason=f"PyCUDA is not importable ({e})")
            return
        except Exception as e:  # cuInit failing: no driver or no device
            rep.result.update(status="no_gpu", reason=f"no usable CUDA device ({cuda_message(e)})")
            return
        JOBS[req["job"]](req, rep)
    except Exception as e:
        from .errors import WorkbenchError
        import pycuda.driver as drv
        if isinstance(e, WorkbenchError):
            rep.result.update(status="error", reason=str(e))
        elif isinstance(e, drv.Error):
            rep.result.update(status="crashed", reason=cuda_message(e))
        else:
            rep.result.update(status="error", reason=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
    finally:
        rep.result["seconds"] = round(time.perf_counter() - t0, 3)
        rep.result["ended"] = time.monotonic()
        rep.flush()


TORCH_WARM = "torch-warm="


def torch_warm_item(root: str, groups: list[tuple[str, str]]) -> str:
    """A --preload item: once torch is imported, run each (family, precision)'s torch expression
    once (providers.warm_torch) while no job waits. base64 JSON: it holds no comma (the items'
    separator)."""
    import base64
    return TORCH_WARM + base64.urlsafe_b64encode(json.dumps({"root": root, "groups": groups}).encode()).decode()


def _torch_warm_steps(item: str) -> list[Callable[[], None]]:
    import base64

    from .family import Project
    from .providers import warm_torch
    spec = json.loads(base64.urlsafe_b64decode(item[len(TORCH_WARM):]))
    project = Project(spec["root"])
    return [lambda n=name, p=precision: warm_torch(project.family(n), p) for name, precision in spec["groups"]]


def lines_between(idle: list[Callable[[], None]], fd: int | None = None, then: Callable[[], None] | None = None):
    """stdin's (or fd's) lines, read unbuffered, so that select() knows whether one is waiting:
    while none is, the next of `idle` runs (a job that arrives waits for at most one of them);
    `then` runs once they are all done (at once if there are none)."""
    import select
    fd, buf = sys.stdin.fileno() if fd is None else fd, b""
    while True:
        while b"\n" not in buf:
            if idle and not select.select([fd], [], [], 0)[0]:
                try:
                    idle.pop(0)()
                except Exception:
                    pass  # a torch warm-up: the baseline's own check meets it and says what it is
                continue
            if not idle and then is not None:
                then()
                then = None
            chunk = os.read(fd, 4096)
            if not chunk:
                if buf:
                    yield buf.decode()
                return
            buf += chunk
        line, buf = buf.split(b"\n", 1)
        yield line.decode()


def _import_torch() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.init()


def _say_ready() -> None:
    """"ready" on stdout: the preloads and warm-ups are done, a job now is answered at once (a
    bench holds a family's baselines back until then: isolate.Server.heard). The parent reads
    only "done" as a job's answer."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()


def serve(max_jobs: int | None = None, preload: tuple[str, ...] = ()) -> None:
    """Run jobs named on stdin, one path a line; answer each with a line on stdout. The CUDA
    context and the imports come first, before the first job arrives: a standby child pays for
    them while another child works, and the baselines' child imports torch (`preload`, ~10 s)
    while the bench compiles, then warms the torch expressions to come while no job waits. A
    crashed context ends the process at once; after `max_jobs` jobs it waits for the parent's
    "exit" line (it may keep us idle a while: isolate.Server's linger), then ends (isolate.py
    starts another for the next job). "exit", or the end of stdin, ends a child at any time."""
    import importlib
    try:
        init_cuda()
        if "torch" in preload:
            # torch first (seconds): on a fresh machine the harness kernels below are meanwhile
            # compiled into the cache by the parent's pool, not a second time here
            try:
                _import_torch()
            except Exception:
                pass  # not installed: the torch row says so
        # the slow imports (pycuda.compiler with pytools, the workbench's own modules) and the
        # harness kernels every job uses, while this child waits for its job
        import pycuda.compiler  # noqa: F401
        import numpy.ma  # noqa: F401  (np.median's first call imports it: 0.08 s of a row's timing without .pyc)
        from . import check, compile, launch, library_calls, providers, staging, timing  # noqa: F401
        providers.shared_tools()
    except Exception:
        pass  # reported by the first job, in its result
    idle: list[Callable[[], None]] = []  # run between jobs while none waits (lines_between)
    for name in preload:  # a module, a library op its versions call (library_calls.warm), or torch-warm
        try:
            if name.startswith(TORCH_WARM):
                idle += _torch_warm_steps(name)
                continue
            from . import library_calls
            if name in library_calls.names():
                library_calls.warm([name])
                continue
            if name == "torch":
                continue  # imported first, above
            importlib.import_module(name)
        except Exception:
            pass  # the job that needs it says so (an ImportError becomes "unavailable")
    done = 0
    lines = lines_between(idle, then=_say_ready)
    for line in lines:
        path = line.strip()
        if not path:
            continue
        if path == "exit":
            break
        run_request(path)
        done += 1
        result = json.loads(Path(json.loads(Path(path).read_text())["result"]).read_text())
        sys.stdout.write("done\n")
        sys.stdout.flush()
        if result.get("status") == "crashed" or any(r.get("status") == "crashed" for r in result.get("rows", [])):
            break
        if max_jobs is not None and done >= max_jobs:
            next(lines, None)  # "exit" (or the end of stdin): the parent lets us go (isolate.Server)
            break


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        rest = sys.argv[2:]
        preload: tuple[str, ...] = ()
        if "--preload" in rest:
            i = rest.index("--preload")
            preload = tuple(m for m in rest[i + 1].split(",") if m)
            del rest[i:i + 2]
        serve(int(rest[0]) if rest else None, preload)
    else:
        run_request(sys.argv[1])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a crash, releasing a poisoned context can hang or abort.
    import os
    os._exit(0)
