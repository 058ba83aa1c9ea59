"""The child process: everything that touches the GPU for one job runs here.

An illegal address or a launch failure poisons a CUDA context for the rest of its process, so
each version (and each baseline) is checked and timed in its own process; `isolate.py` starts
it, enforces the timeout and turns a crash into that version's result.

    python -m workbench.worker REQUEST.json

writes its result (and, as it goes, its progress) to the path named in the request.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

NAN_BITS = 0x7FC00000


class Reporter:
    """Writes the result file after each phase, so a timeout still says how far a job got."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.result: dict[str, Any] = {"status": "started", "phase": "starting"}

    def phase(self, text: str) -> None:
        self.result["phase"] = text
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.result, default=_jsonable))
        tmp.replace(self.path)


def _jsonable(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if hasattr(x, "to_json"):
        return x.to_json()
    return str(x)


def cuda_message(e: BaseException) -> str:
    """'cuCtxSynchronize failed: an illegal memory access was encountered' -> the reason alone."""
    text = str(e).strip()
    return text.split("failed: ", 1)[-1] if "failed: " in text else text


def init_cuda() -> dict:
    import pycuda.driver as drv
    import pycuda.autoprimaryctx  # noqa: F401  (the primary context: cuBLAS and torch share it)
    dev = drv.Context.get_device()
    major, minor = dev.compute_capability()
    a = drv.device_attribute
    try:  # the kernel module's version, as nvidia-smi shows it
        import re
        m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", open("/proc/driver/nvidia/version").readline())
        driver_version = m.group(1) if m else None
    except OSError:
        driver_version = None
    return {"name": dev.name(), "compute_capability": f"{major}.{minor}", "driver_version": driver_version,
            "sms": dev.get_attribute(a.MULTIPROCESSOR_COUNT),
            "l2_bytes": dev.get_attribute(a.L2_CACHE_SIZE),
            "memory_bytes": dev.total_memory(),
            "driver": drv.get_driver_version(), "cuda": ".".join(map(str, drv.get_version())),
            "clock_mhz": dev.get_attribute(a.CLOCK_RATE) // 1000}


class Buffers:
    """Device buffers for one case: the op's arguments, a version's scratch, and the expected
    outputs (uploaded once, compared on the device)."""

    def __init__(self, family, case):
        import pycuda.driver as drv
        self.drv = drv
        self.family = family
        self.case = case
        self.sizes = case.sizes
        self.allocs: dict[str, Any] = {}
        self.buffers: dict[str, Any] = {}
        self.expected: dict[str, int] = {}
        for arg in family.args:
            n = int(np.prod(family.shape(arg, self.sizes)))
            self._alloc(arg.name, max(4, 4 * n), arg.dtype)
            if arg.is_output:
                self._alloc(f"expected {arg.name}", max(4, 4 * n), "f32")
                self.drv.memcpy_htod(self.buffers[f"expected {arg.name}"].ptr,
                                     np.ascontiguousarray(case.expected[arg.name], dtype=np.float32))

    def _alloc(self, name, nbytes, dtype):
        from .launch import Buffer
        mem = self.drv.mem_alloc(nbytes)
        self.allocs[name] = mem
        self.buffers[name] = Buffer(int(mem), nbytes, dtype)

    def with_scratch(self, scratch: dict[str, tuple[int, str]]) -> dict:
        for name, (nbytes, dtype) in scratch.items():
            if name not in self.buffers or self.buffers[name].nbytes < nbytes:
                if name in self.allocs:
                    self.allocs.pop(name).free()
                self._alloc(name, nbytes, dtype)
        return self.buffers

    def reset(self, scratch_names=()) -> None:
        """Upload inputs, poison outputs and scratch (NaN) so an unwritten element shows."""
        from .check import INT_POISON
        for arg in self.family.args:
            buf = self.buffers[arg.name]
            if arg.is_input:
                self.drv.memcpy_htod(buf.ptr, np.ascontiguousarray(self.case.inputs[arg.name]))
            else:
                bits = NAN_BITS if arg.dtype == "f32" else INT_POISON & 0xFFFFFFFF
                self.drv.memset_d32(buf.ptr, bits, buf.nbytes // 4)
        for name in scratch_names:
            self.drv.memset_d32(self.buffers[name].ptr, NAN_BITS, self.buffers[name].nbytes // 4)

    def outputs(self) -> dict[str, np.ndarray]:
        out = {}
        for arg in self.family.args:
            if arg.is_output:
                host = np.empty(self.family.shape(arg, self.sizes), dtype=arg.np_dtype)
                self.drv.memcpy_dtoh(host, self.buffers[arg.name].ptr)
                out[arg.name] = host
        return out

    def verify(self, version, comparer) -> list:
        """Compare every output on the device; on a mismatch, download for the details."""
        from .check import compare_all
        reports = []
        for arg in self.family.args:
            if arg.is_output:
                n = int(np.prod(self.family.shape(arg, self.sizes)))
                reports.append(comparer(arg, self.buffers[arg.name].ptr, self.buffers[f"expected {arg.name}"].ptr,
                                        n, *version.tolerance(arg)))
        if all(r.ok for r in reports):
            return reports
        return compare_all(version, self.case, self.outputs())

    def free(self):
        for mem in self.allocs.values():
            mem.free()
        self.allocs.clear()


class CheckLog:
    """What the checks found: a compact summary of the passes, the details of the failures."""

    def __init__(self):
        self.count = 0
        self.sizes: list[dict] = []
        self.seeds: set[int] = set()
        self.block_sizes: set = set()
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.after_timing = False
        self.failures: list[dict] = []

    def add(self, sizes, seed, block_size, when, reports) -> bool:
        ok = all(r.ok for r in reports)
        self.count += 1
        if sizes not in self.sizes:
            self.sizes.append(dict(sizes))
        self.seeds.add(seed)
        self.block_sizes.add(block_size)
        self.after_timing |= when == "after timing"
        for r in reports:
            if r.max_abs == r.max_abs:  # not NaN
                self.max_abs = max(self.max_abs, r.max_abs)
                self.max_rel = max(self.max_rel, r.max_rel)
        if not ok and len(self.failures) < 10:
            self.failures.append({"sizes": dict(sizes), "seed": seed, "block_size": block_size, "when": when,
                                  "ok": False, "args": [r.to_json() for r in reports]})
        return ok

    def to_json(self) -> dict:
        return {"count": self.count, "sizes": self.sizes, "seeds": sorted(self.seeds),
                "block_sizes": sorted(self.block_sizes, key=lambda b: -1 if b is None else b),
                "max_abs": self.max_abs, "max_rel": self.max_rel, "after_timing": self.after_timing}


def run_version(req: dict, rep: Reporter) -> None:
    import pycuda.driver as drv
    from . import compile as wb_compile
    from .check import DeviceComparer, load_case
    from .family import Project
    from .launch import LaunchConfigError, build_plan, scratch_sizes
    from .timing import L2Flush, measure

    project = Project(req["root"])
    family = project.family(req["family"])
    version = family.version(req["version"])
    res = rep.result
    res.update(family=family.name, version=version.number, title=version.title)
    rep.phase("compile")
    module, resources, warnings = wb_compile.load_module(version.path)
    res["resources"] = {k: r.__dict__ for k, r in resources.items()}
    res["compiler_warnings"] = warnings
    stream = drv.Stream()
    block_sizes = req.get("block_sizes") or list(version.block_sizes)
    unusable: dict[str, str] = {}
    log = CheckLog()
    failed = False
    cases = [load_case(p) for p in req["cases"]]

    comparer = DeviceComparer()

    def check_case(dev, bs, when: str) -> bool:
        scratch = scratch_sizes(version, dev.sizes, bs, req.get("params"))
        bufs = dev.with_scratch(scratch)
        plan = build_plan(version, module, dev.sizes, bs, bufs, req.get("params"), resources)
        dev.reset(scratch)
        plan(stream)
        stream.synchronize()
        ok = log.add(dev.sizes, dev.case.seed, bs, when, dev.verify(version, comparer))
        res["check"], res["failures"] = log.to_json(), log.failures
        return ok

    rep.phase("check")
    for case in cases:
        if version.unmet(case.sizes):
            res.setdefault("skipped_sizes", []).append(
                {"sizes": case.sizes, "requires": version.unmet(case.sizes)})
            continue
        dev = Buffers(family, case)
        for bs in block_sizes:
            if str(bs) in unusable:
                continue
            rep.phase(f"check {case.label} block size {bs}")
            try:
                if not check_case(dev, bs, "before timing"):
                    failed = True
            except LaunchConfigError as e:
                unusable[str(bs)] = str(e)
        dev.free()
    res["unusable_block_sizes"] = unusable
    usable = [bs for bs in block_sizes if str(bs) not in unusable]
    if not usable:
        res["status"] = "failed"
        res["reason"] = "no block size can be launched: " + "; ".join(unusable.values())
        return
    if failed:
        res["status"] = "failed"
        return
    timed = cases[0]
    if version.unmet(timed.sizes):
        res["status"] = "refused"
        res["reason"] = f"requires {' and '.join(version.unmet(timed.sizes))}"
        return
    if req.get("time", True):
        rep.phase("time")
        flush = L2Flush() if req.get("flush", True) else None
        timings = {}
        dev = Buffers(family, timed)
        for bs in usable:
            rep.phase(f"time block size {bs}")
            scratch = scratch_sizes(version, timed.sizes, bs, req.get("params"))
            bufs = dev.with_scratch(scratch)
            dev.reset(scratch)
            plan = build_plan(version, module, timed.sizes, bs, bufs, req.get("params"), resources)
            timings[str(bs)] = measure(plan, stream, flush, budget_s=req.get("budget", 0.4)).to_json()
            res["launches"] = plan.described
        res["timings"] = timings
        rep.phase("re-check after timing")
        for bs in usable:
            if not check_case(dev, bs, "after timing"):
                res["status"] = "failed"
                res["reason"] = "passed before timing but failed after it"
                return
        dev.free()
    res["status"] = "passed"


def run_torch(req: dict, rep: Reporter) -> None:
    """Time the family's PyTorch equivalent on the first case, the same way as our versions."""
    import pycuda.driver as drv
    from .check import compare, load_case
    from .family import Project
    from .timing import L2Flush, measure
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        rep.result.update(status="unavailable", reason="torch is not installed")
        return
    project = Project(req["root"])
    family = project.family(req["family"])
    case = load_case(req["cases"][0])
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    tensors = {k: torch.from_numpy(np.array(v)).to(dev) for k, v in case.inputs.items()}
    for arg in family.args:
        if arg.role == "out":
            tensors.setdefault(arg.name, torch.empty(family.shape(arg, case.sizes), device=dev))
    env = {**family.env(case.sizes), **tensors, "torch": torch, "F": F,
           "ref": family.reference_module}
    code = compile(family.torch, f"<{family.name} torch>", "eval")

    def call():
        return eval(code, {"__builtins__": {}}, env)  # the contract's own expression

    stream = drv.Stream()
    ext = torch.cuda.ExternalStream(stream.handle)
    rep.phase("torch check")
    with torch.cuda.stream(ext):
        got = call()
    torch.cuda.synchronize()
    got = got if isinstance(got, (tuple, list)) else (got,)
    errors = {}
    for name, value in zip(family.torch_outputs, got):
        arg = family.arg(name)
        r = compare(arg, case.expected[name], value.detach().float().cpu().numpy(), *_tol(family, arg))
        errors[name] = {"ok": r.ok, "max_abs": r.max_abs, "max_rel": r.max_rel}
    rep.phase("torch time")

    def launch(_stream):
        with torch.cuda.stream(ext):
            call()
    t = measure(launch, stream, L2Flush(), budget_s=req.get("budget", 0.4))
    rep.result.update(status="passed", timing=t.to_json(), check=errors,
                      torch=torch.__version__, expression=family.torch)


def _tol(family, arg):
    return (arg.atol if arg.atol is not None else family.atol,
            arg.rtol if arg.rtol is not None else family.rtol)


def run_copy(req: dict, rep: Reporter) -> None:
    """A plain copy of the family's byte count, timed exactly like a version."""
    import pycuda.driver as drv
    from .timing import L2Flush, copy_time
    rep.phase("copy")
    t = copy_time(int(req["bytes"]), L2Flush() if req.get("flush", True) else None, drv.Stream(),
                  budget_s=req.get("budget", 0.4))
    rep.result.update(status="passed", timing=t.to_json(), bytes=int(req["bytes"]))


def run_probe(req: dict, rep: Reporter) -> None:
    from .timing import copy_ceiling
    rep.phase("ceiling")
    rep.result["ceiling"] = copy_ceiling(refresh=req.get("refresh", False))
    rep.result["status"] = "passed"


class _Sub:
    """A Reporter stand-in that collects one part of a combined job into its own dict."""

    def __init__(self, parent: Reporter, key: str):
        self.parent, self.result = parent, {"status": "started"}
        parent.result[key] = self.result

    def phase(self, text: str) -> None:
        self.parent.phase(text)


def run_baselines(req: dict, rep: Reporter) -> None:
    """The family's baselines in one process: a copy of its bytes, and its PyTorch equivalent."""
    import pycuda.driver as drv
    if req.get("copy_bytes"):
        run_copy({**req, "bytes": req["copy_bytes"]}, _Sub(rep, "copy"))
    if req.get("torch"):
        sub = _Sub(rep, "torch")
        try:
            run_torch(req, sub)
        except drv.Error:
            raise
        except Exception as e:  # a torch expression that fails is that baseline's result, not the job's
            sub.result.update(status="error", reason=f"{type(e).__name__}: {e}")
    rep.result["status"] = "passed"


def run_baselines_all(req: dict, rep: Reporter) -> None:
    """Several families' baselines in one process: torch and its kernels load once."""
    done: dict = {}
    rep.result["families"] = done
    for job in req["families"]:
        sub = _Sub(rep, "_current")
        run_baselines({**req, **job}, sub)
        done[job["family"]] = sub.result
        rep.flush()  # a later crash keeps the families already done
    rep.result.pop("_current", None)
    rep.result["status"] = "passed"


JOBS = {"version": run_version, "baselines": run_baselines, "baselines_all": run_baselines_all,
        "probe": run_probe}


def main(argv: list[str]) -> int:
    req = json.loads(Path(argv[0]).read_text())
    rep = Reporter(req["result"])
    t0 = time.perf_counter()
    try:
        try:
            rep.result["device"] = init_cuda()
        except ImportError as e:
            rep.result.update(status="no_gpu", reason=f"PyCUDA is not importable ({e})")
            return 0
        except Exception as e:  # cuInit failing: no driver or no device
            rep.result.update(status="no_gpu", reason=f"no usable CUDA device ({cuda_message(e)})")
            return 0
        JOBS[req["job"]](req, rep)
    except Exception as e:
        from .errors import WorkbenchError
        import pycuda.driver as drv
        if isinstance(e, WorkbenchError):
            status = "compile_error" if type(e).__name__ == "CompileError" else "error"
            rep.result.update(status=status, reason=str(e))
        elif isinstance(e, drv.Error):
            rep.result.update(status="crashed", reason=cuda_message(e))
        else:
            rep.result.update(status="error", reason=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc())
    finally:
        rep.result["seconds"] = round(time.perf_counter() - t0, 3)
        rep.flush()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: after a crash, releasing a poisoned context can hang or abort.
    import os
    os._exit(code)
