"""Providers: everything that can fill a row of a table, behind one interface (check, then time).

A provider computes the family's op on device buffers: a version of the family (its kernels and
library calls, launched through launch.py), the family's PyTorch equivalent, or a plain copy of
the family's byte count (the practical ceiling at that size). `run_row` drives any of them the
same way, so every row of a table is checked and timed by the same code:

1. check: for every case (size set and seed) and every configuration (block size), reset the
   buffers (inputs restored, outputs and scratch poisoned with NaN), launch, and compare every
   output element on the device against the reference's;
2. time (cases[0], the timed size): every configuration briefly, then the front-runners with
   the full budget (timing.py: L2 flushed before and drained after each launch);
3. check again after timing, at the timed size, at every configuration.

This module runs inside the worker process (worker.py), which owns the CUDA context.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from . import expr
from .check import INT_POISON, Case, compare_all
from .errors import ContractError
from .family import DTYPES, Arg, Family, Version
from .options import RowJob
from .results import CheckSummary, Measured, Row
from .timing import PRECISION

NAN_BITS = {"f32": 0x7FC00000, "bf16": 0x7FC07FC0}  # bf16: two NaNs per 32-bit word
ITEMSIZE = {name: np.dtype(dt).itemsize for name, dt in DTYPES.items()}
# Timing: every configuration gets a short look, the ones near the best the full budget.
SCREEN_FRACTION = 0.25
FINALISTS = 2        # at most this many configurations get the full budget:
NEAR = 1.05          # those within 5% of the best screened time (a screening's spread is ~3%)
SCREEN_PRECISION = 2 * PRECISION  # a screening stops once its median is known to +-2%
Launch = Callable[[Any], None]


def _nbytes(arg: Arg, shape: Sequence[int]) -> int:
    """Whole 32-bit words (poisoning fills words), at least one."""
    return max(4, -(-int(np.prod(shape)) * ITEMSIZE[arg.dtype] // 4) * 4)


def expected_nbytes(shape: Sequence[int]) -> int:
    """An expected output's bytes on the device: float32, at least one word."""
    return max(4, 4 * int(np.prod(shape)))


def upload(dst: int, nbytes: int, host: np.ndarray) -> None:
    """Copy `host` to `nbytes` of device memory; a shorter array's tail is zeroed first (an odd
    bf16 count leaves half a word, and every restore copy would read it unwritten)."""
    import pycuda.driver as drv
    host = np.ascontiguousarray(host)
    if host.nbytes < nbytes:
        drv.memset_d32(dst, 0, nbytes // 4)
    drv.memcpy_htod(dst, host)


class CaseBuffers:
    """One case on the device: a buffer per argument, a pristine copy of every input (restored
    by a device-to-device copy before each launch: re-uploading a 1.6 GB softmax input from the
    host at every block size would dominate a bench), the expected outputs (compared on the
    device), and the scratch a provider asks for."""

    def __init__(self, args: Sequence[Arg], shapes: dict[str, tuple[int, ...]], case: Case):
        import pycuda.driver as drv
        from .launch import DeviceBuffer
        self.drv, self._DeviceBuffer = drv, DeviceBuffer
        self.args, self.shapes, self.case, self.sizes = list(args), shapes, case, case.sizes
        self.allocs: dict[str, Any] = {}
        self.buffers: dict[str, DeviceBuffer] = {}
        self._pristine: dict[str, Any] = {}   # an allocation of ours, or a staged address (int)
        self._scratch: list[str] = []
        staged = case.staged or {"in": {}, "exp": {}}
        for arg in self.args:
            nbytes = _nbytes(arg, shapes[arg.name])
            self._alloc(arg.name, nbytes, arg.dtype)
            if arg.is_input:
                ptr, size = staged["in"].get(arg.name, (None, 0))
                if ptr is not None and size == nbytes:
                    self._pristine[arg.name] = ptr  # staged once for every version (staging.py)
                else:
                    self._pristine[arg.name] = drv.mem_alloc(nbytes)
                    upload(int(self._pristine[arg.name]), nbytes, case.inputs[arg.name])
            if arg.is_output and arg.name in case.expected:  # a case made to be profiled has none
                nbytes = expected_nbytes(shapes[arg.name])
                ptr, size = staged["exp"].get(arg.name, (None, 0))
                if ptr is not None and size == nbytes:
                    self.buffers[f"expected {arg.name}"] = DeviceBuffer(ptr, nbytes, "f32")
                else:
                    self._alloc(f"expected {arg.name}", nbytes, "f32")
                    upload(self.buffers[f"expected {arg.name}"].ptr, nbytes,
                           np.asarray(case.expected[arg.name], dtype=np.float32))

    def _alloc(self, name: str, nbytes: int, dtype: str) -> None:
        mem = self.drv.mem_alloc(nbytes)
        self.allocs[name] = mem
        self.buffers[name] = self._DeviceBuffer(int(mem), nbytes, dtype)

    def with_scratch(self, scratch: dict[str, tuple[int, str]]) -> dict:
        """Make sure each scratch buffer exists and is large enough; they are poisoned by reset."""
        for name, (nbytes, dtype) in scratch.items():
            if name not in self.buffers or self.buffers[name].nbytes < nbytes:
                if name in self.allocs:
                    self.allocs.pop(name).free()
                self._alloc(name, nbytes, dtype)
        self._scratch = list(scratch)
        return self.buffers

    def reset(self) -> None:
        """Restore the inputs, poison the outputs and scratch so an unwritten element shows."""
        for arg in self.args:
            buf = self.buffers[arg.name]
            if arg.is_input:
                self.drv.memcpy_dtod(buf.ptr, self._pristine[arg.name], buf.nbytes)
            else:
                self._poison(buf)
        for name in self._scratch:
            self._poison(self.buffers[name])

    def _poison(self, buf) -> None:
        bits = NAN_BITS.get(buf.dtype, INT_POISON & 0xFFFFFFFF)
        self.drv.memset_d32(buf.ptr, bits, buf.nbytes // 4)

    def outputs(self) -> dict[str, np.ndarray]:
        from .check import from_storage
        out = {}
        for arg in self.args:
            if arg.is_output:
                host = np.empty(self.shapes[arg.name], dtype=DTYPES[arg.dtype])
                self.drv.memcpy_dtoh(host, self.buffers[arg.name].ptr)
                out[arg.name] = from_storage(host, arg.dtype)
        return out

    def free(self) -> None:
        for mem in [*self.allocs.values(), *self._pristine.values()]:
            if not isinstance(mem, int):  # a staged buffer belongs to its owner
                mem.free()
        self.allocs.clear()
        self._pristine.clear()


class Provider:
    """What fills one row. Subclasses say what they compute and how it is launched; `close`
    frees what a provider holds on the device."""

    kind = "version"
    title = ""
    version: int | None = None
    # Checked again after timing: a version that passes before and not after has a race, a
    # missed write or state that leaks between launches. Not the torch baselines: some keep state
    # across calls on purpose (AdamW's optimizer counts its own steps).
    recheck_after_timing = True

    def args(self) -> list[Arg]:
        """The buffers the provider works on (the family's arguments, for all but the copy)."""
        raise NotImplementedError

    def configs(self) -> list[int | None]:
        """What is swept when timing: block sizes, or [None]."""
        return [None]

    def unmet(self, sizes: dict) -> list[str]:
        """Preconditions these sizes violate (a version's); such cases are skipped."""
        return []

    def checked(self, arg: Arg) -> bool:
        return arg.is_output

    def tolerance(self, arg: Arg, sizes: dict | None = None) -> tuple[float, float]:
        """(atol, rtol) for an output at a case's sizes (some grow with a size)."""
        raise NotImplementedError

    def scratch(self, sizes: dict, config) -> dict[str, tuple[int, str]]:
        return {}

    def prepare(self, bufs: CaseBuffers, config) -> tuple[Launch, Launch | None]:
        """(launch, collect): `launch(stream)` runs the op; `collect(stream)`, when not None, runs
        after a check's launch to put its results into the output buffers (torch returns new
        tensors)."""
        raise NotImplementedError

    def described(self) -> list[str]:
        return []

    def close(self) -> None:
        pass


class VersionProvider(Provider):
    """A version of the family: its kernels, memsets and library calls, as its header says."""

    def __init__(self, version: Version, block_sizes: list[int] | None = None):
        from . import compile as wb_compile
        self.v = version
        self.family = version.family
        self.version, self.title = version.number, version.title
        if version.arch and (why := version.arch_refusal(wb_compile.device_arch())):
            # What it would build here is a stub (a trap): say why instead of launching it.
            raise ContractError(f"{version.label} {why}")
        self.module, self.resources, self.warnings = wb_compile.load_module(version.path)
        self._configs = list(block_sizes or version.block_sizes)
        self._described: list[str] = []

    def args(self) -> list[Arg]:
        return self.v.args

    def configs(self):
        return self._configs

    def unmet(self, sizes):
        return self.v.unmet(sizes)

    def tolerance(self, arg, sizes=None):
        return self.v.tolerance(arg, sizes)

    def scratch(self, sizes, config):
        from .launch import scratch_sizes
        return scratch_sizes(self.v, sizes, config)

    def prepare(self, bufs, config):
        from .launch import build_plan
        plan = build_plan(self.v, self.module, bufs.sizes, config, bufs.buffers, None, self.resources)
        self._described = plan.described
        return plan, None

    def described(self):
        return self._described


class TorchProvider(Provider):
    """The family's PyTorch equivalent (the contract's `torch` expression), on views of the same
    device buffers, on the same stream. Only `torch_outputs` are compared."""

    kind = "torch"
    recheck_after_timing = False

    def __init__(self, family: Family, precision: str | None = None):
        import torch
        import torch.nn.functional as F
        self.family, self.torch, self.F = family, torch, F
        self.precision = precision or family.default_precision
        self.expression = family.torch_expression(self.precision)
        self.title = f"torch: {self.expression}"
        self.code = compile(self.expression, f"<{family.name} torch>", "eval")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self._stream = None

    def args(self):
        return self.family.args_for(self.precision)

    def checked(self, arg):
        return arg.name in self.family.torch_outputs

    def tolerance(self, arg, sizes=None):
        return self.family.tolerance(arg, self.precision, sizes)

    def prepare(self, bufs, config):
        import pycuda.driver as drv
        torch = self.torch
        if self._stream is None:
            self._stream = drv.Stream()  # the caller's stream is handed in per launch
        views = {a.name: _torch_view(torch, bufs.buffers[a.name], bufs.shapes[a.name]) for a in bufs.args}
        env = {**self.family.env(bufs.sizes), **views, "torch": torch, "F": self.F,
               "ref": self.family.reference_module}
        result: dict[str, Any] = {}

        def launch(stream):
            with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle)):
                got = eval(self.code, {"__builtins__": {}}, env)  # the contract's own expression
            result["got"] = got if isinstance(got, (tuple, list)) else (got,)

        def collect(stream):
            with torch.cuda.stream(torch.cuda.ExternalStream(stream.handle)):
                for name, value in zip(self.family.torch_outputs, result["got"]):
                    target = views[name]
                    target.copy_(value.detach().reshape(target.shape).to(target.dtype))
        return launch, collect

    def described(self):
        return [self.expression]


def warm_torch(family: Family, precision: str) -> None:
    """The family's torch expression once, unchecked, at its smallest test size, on drawn inputs.
    PyTorch's first call of an op in a process can take seconds (on a fresh H100 machine: the
    first bf16 cross-entropy with its autograd 3.0 s, the first fused AdamW 2.7 s, the first bf16
    SDPA 0.8 s; each later call milliseconds), and a bench waits on it inside the baseline's
    check. The baselines' child pays it as it starts instead (worker.serve), while the versions
    run."""
    import pycuda.driver as drv
    from .check import make_inputs
    fits = [s for s in family.test_sizes
            if all(expr.evaluate(p, family.env(s)) for p in family.preconditions)]
    if not fits or not family.torch_expression(precision):
        return
    sizes = min(fits, key=lambda s: sum(int(np.prod(family.shape(a, s))) for a in family.args_for(precision)))
    provider = TorchProvider(family, precision)
    case = Case(dict(sizes), 0, make_inputs(family, sizes, 0, precision), {}, precision)
    bufs = CaseBuffers(provider.args(), shapes_for(provider.args(), family.env)(case), case)
    try:
        bufs.reset()
        launch, collect = provider.prepare(bufs, None)
        stream = drv.Stream()
        launch(stream)
        collect(stream)
        stream.synchronize()
    finally:
        bufs.free()
        provider.close()
        provider.torch.cuda.empty_cache()


def _torch_view(torch, buf, shape):
    """A torch tensor on a device buffer we own (no copy), through __cuda_array_interface__."""
    typestr = {"f32": "<f4", "i32": "<i4", "bf16": "<u2"}[buf.dtype]

    class View:
        __cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (buf.ptr, False),
                                    "version": 3, "strides": None}
    t = torch.as_tensor(View(), device="cuda")
    return t.view(torch.bfloat16) if buf.dtype == "bf16" else t


class CopyProvider(Provider):
    """A device-to-device copy of the family's byte count (half read, half written): what any
    kernel moving those bytes could at best achieve, timed exactly like one. Its check: the copy
    equals its source."""

    kind = "copy"

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.words = max(1, nbytes // 8)
        self.title = "copy of the same bytes (the ceiling at this size)"
        self._args = [Arg("dst", "out", "W"), Arg("src", "in", "W", init="uniform(-1, 1)")]
        self._ramp = None

    def args(self):
        return self._args

    def tolerance(self, arg, sizes=None):
        return 0.0, 0.0

    def case(self) -> tuple[Case, dict]:
        """A ramp (word i holds float(i)), as good as random numbers at showing a lost or shifted
        word, written on the device: it is both the source's pristine copy and the expected
        output, so nothing crosses from the host (drawing AdamW's 435M words on the host and
        uploading them twice took ~1 s a table, ~10 s of a bench --all). The host's copy of the
        ramp is made only if a check fails and its mismatches are listed."""
        import pycuda.driver as drv
        nbytes = self.words * 4
        self._ramp = drv.mem_alloc(nbytes)
        _ramp_kernel().prepared_call((min(-(-self.words // 256), 4096), 1, 1), (256, 1, 1),
                                     np.uintp(int(self._ramp)), np.int64(self.words))
        ramp = (int(self._ramp), nbytes)
        words = self.words
        shapes = {"dst": (words,), "src": (words,)}
        case = Case({"W": words}, 0, _Lazy(src=lambda: _host_ramp(words)), _Lazy(dst=lambda: _host_ramp(words)),
                    staged={"in": {"src": ramp}, "exp": {"dst": ramp}})
        return case, shapes

    def prepare(self, bufs, config):
        import pycuda.driver as drv
        dst, src, n = bufs.buffers["dst"].ptr, bufs.buffers["src"].ptr, self.words * 4
        return (lambda stream: drv.memcpy_dtod_async(dst, src, n, stream)), None

    def close(self) -> None:
        ramp, self._ramp = self._ramp, None
        if ramp is not None:
            try:
                ramp.free()
            except Exception:  # the context is already gone (a crash): nothing left to free
                pass

    def described(self):
        return [f"cuMemcpyDtoDAsync of {self.words * 4:,} bytes"]


RAMP_KERNEL = r"""
extern "C" __global__ void ramp_f32(float* p, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = (float)i;  // rounded to nearest, as NumPy's float32 arange rounds i
}
"""


def _ramp_kernel():
    if "ramp" not in _SHARED:
        from .compile import harness_module
        _SHARED["ramp"] = harness_module(RAMP_KERNEL).get_function("ramp_f32")
        _SHARED["ramp"].prepare("Pq")
    return _SHARED["ramp"]


def _host_ramp(words: int) -> np.ndarray:
    return np.arange(words, dtype=np.float64).astype(np.float32)


class _Lazy(dict):
    """A case's arrays made on first use (the copy's host ramp: wanted only to list mismatches)."""

    def __init__(self, **makers):
        super().__init__()
        self._makers = makers

    def __missing__(self, name):
        self[name] = value = self._makers[name]()
        return value

    def __contains__(self, name):
        return name in self._makers

    def keys(self):
        return self._makers.keys()


# -- the driver --------------------------------------------------------------------------------
class Checker:
    """Checks a provider's launch at one case and configuration, and keeps the record."""

    def __init__(self, provider: Provider, row: Row, comparer):
        self.p, self.row, self.comparer = provider, row, comparer
        self.summary = CheckSummary()
        row.check = self.summary

    def __call__(self, bufs: CaseBuffers, config, when: str, stream) -> bool:
        bufs.with_scratch(self.p.scratch(bufs.sizes, config))
        launch, collect = self.p.prepare(bufs, config)
        bufs.reset()
        launch(stream)
        if collect is not None:
            collect(stream)
        stream.synchronize()
        reports = []
        for arg in bufs.args:
            if arg.is_output and self.p.checked(arg):
                n = int(np.prod(bufs.shapes[arg.name]))
                reports.append(self.comparer(arg, bufs.buffers[arg.name].ptr,
                                             bufs.buffers[f"expected {arg.name}"].ptr, n,
                                             *self.p.tolerance(arg, bufs.sizes)))
        ok = all(r.ok for r in reports)
        if not ok:  # download for the details: the first mismatches in the op's coordinates
            outputs = bufs.outputs()
            reports = compare_all([a for a in bufs.args if a.is_output and self.p.checked(a)], self.p.tolerance,
                                  bufs.case, outputs)
        self.summary.add(bufs.sizes, bufs.case.seed, config, when,
                         max((r.max_abs for r in reports), default=0.0), max((r.max_rel for r in reports), default=0.0))
        if not ok and len(self.row.failures) < 10:
            self.row.failures.append({"sizes": dict(bufs.sizes), "seed": bufs.case.seed, "block_size": config,
                                      "when": when, "ok": False, "args": [r.to_json() for r in reports]})
        return ok


_SHARED: dict[str, Any] = {}


def shared_tools() -> tuple[Any, Any]:
    """This process's DeviceComparer and L2Flush, made once (their modules loaded, the flush's
    buffer allocated): a worker started ahead makes them while another works (worker.serve)."""
    if "comparer" not in _SHARED:
        from .check import DeviceComparer
        from .timing import L2Flush
        _SHARED["comparer"], _SHARED["flush"] = DeviceComparer(), L2Flush()
    return _SHARED["comparer"], _SHARED["flush"]


def run_row(provider: Provider, family_name: str, cases: list[Case], shapes_of: Callable[[Case], dict],
            options: RowJob, report: Callable[[str], None], row: Row) -> Row:
    """Check, time, re-check one provider; fills `row` as it goes (the worker flushes it to disk
    at every phase, so a crash or a timeout still says how far it got). The steps are _RowSteps'."""
    import pycuda.driver as drv

    stream = drv.Stream()
    comparer, l2flush = shared_tools()
    checker = Checker(provider, row, comparer)
    configs = provider.configs()
    report("check")
    steps = _RowSteps(provider, row, checker, stream, report)
    timing = options.time
    try:
        failed = steps.check(cases, configs, shapes_of, keep_timed=timing)
        usable = [c for c in configs if c not in row.unusable_block_sizes]
        if steps.ends_before_timing(usable, failed, cases[0]):
            return row
        if timing:
            steps.time(usable, cases[0], shapes_of, options, l2flush if options.flush else None)
            if not steps.recheck(usable):
                return row
    finally:
        steps.free_kept()
    row.status = "passed"
    return row


class _RowSteps:
    """run_row's steps on one provider's row, each filling the row: check at every case and
    configuration, then (when it may be timed) time every configuration and re-check; a row's
    seconds go to its phases (check, time, re-check). The timed case's buffers are kept from the
    check for the timing (uploading 3 GB twice costs seconds) and freed by free_kept, whichever
    way the row ends."""

    def __init__(self, provider: Provider, row: Row, checker: Checker, stream, report: Callable[[str], None]):
        self.p, self.row, self.checker, self.stream, self.report = provider, row, checker, stream, report
        self.kept: CaseBuffers | None = None  # the timed case's buffers
        self._clock = time.perf_counter()

    def spent(self, phase: str) -> None:  # where a row's seconds go: check, time, re-check
        now = time.perf_counter()
        self.row.phases[phase] = self.row.phases.get(phase, 0.0) + now - self._clock
        self._clock = now

    def check(self, cases: list[Case], configs: list, shapes_of: Callable[[Case], dict], keep_timed: bool) -> bool:
        """Check every case the provider can run at every configuration that launches; the
        cases it cannot run are the row's skipped sizes, the configurations that cannot launch
        its unusable block sizes. True when a check failed."""
        from .launch import LaunchConfigError
        failed = False
        skipped: list[dict] = []
        for case in cases:
            unmet = self.p.unmet(case.sizes)
            if unmet:
                if case.sizes not in [s["sizes"] for s in skipped]:
                    skipped.append({"sizes": case.sizes, "requires": unmet})
                continue
            bufs = CaseBuffers(self.p.args(), shapes_of(case), case)
            if keep_timed and case is cases[0]:
                self.kept = bufs
            try:
                for config in configs:
                    if config in self.row.unusable_block_sizes:
                        continue
                    self.report(f"check {case.label}" + (f" block size {config}" if config is not None else ""))
                    try:
                        failed |= not self.checker(bufs, config, "before timing", self.stream)
                    except LaunchConfigError as e:
                        self.row.unusable_block_sizes[config] = str(e)
            finally:
                if bufs is not self.kept:
                    bufs.free()
        self.row.skipped_sizes = skipped
        self.spent("check")
        return failed

    def ends_before_timing(self, usable: list, failed: bool, timed: Case) -> bool:
        """The row's end when no configuration launches, a check failed or the timed size is
        one the provider cannot run (its status and reason set); False when it goes on."""
        row = self.row
        if not usable:
            row.status, row.reason = "failed", "no block size can be launched: " + "; ".join(row.unusable_block_sizes.values())
            return True
        if failed:
            row.status = "failed"
            return True
        if self.p.unmet(timed.sizes):
            row.status, row.reason = "refused", f"requires {' and '.join(self.p.unmet(timed.sizes))}"
            return True
        return False

    def time(self, usable: list, timed: Case, shapes_of: Callable[[Case], dict], options: RowJob, flush) -> None:
        """Time every usable configuration at the timed case (briefly, when screening), then the
        front-runners with the rest of the budget; the row's launches and timings."""
        bufs = self.kept = self.kept or CaseBuffers(self.p.args(), shapes_of(timed), timed)
        budget = float(options.budget)
        screen = options.screen and len(usable) > FINALISTS
        raw, carried = {}, {}
        for config in usable:
            self.report("time" + (f" block size {config}" if config is not None else ""))
            raw[config] = self._measure(bufs, timed, config, flush, carried.setdefault(config, {}),
                                        budget_s=budget * SCREEN_FRACTION if screen else budget,
                                        min_reps=9 if screen else 15, fewest=3 if screen else 5,
                                        precision=SCREEN_PRECISION if screen else PRECISION)
        if screen:
            best = min(t.median_us for t in raw.values())
            near = [c for c in sorted(raw, key=lambda c: raw[c].median_us) if raw[c].median_us <= NEAR * best]
            for config in near[:FINALISTS]:  # the rest of the budget, added to its screening samples
                self.report(f"time block size {config} (front-runner, full budget)")
                raw[config] = self._measure(bufs, timed, config, flush, carried[config],
                                            budget_s=budget * (1 - SCREEN_FRACTION))
        self.row.launches = self.p.described()
        nbytes, flops, ceiling = options.bytes, options.flops, options.ceiling_gbps
        self.row.timings = {c: Measured.of(c, t, nbytes, flops, ceiling) for c, t in raw.items()}
        self.spent("time")

    def _measure(self, bufs: CaseBuffers, timed: Case, config, flush, carry: dict, **how):
        """One configuration timed from fresh buffers (timing.measure, going on from `carry`)."""
        from .timing import measure
        bufs.with_scratch(self.p.scratch(timed.sizes, config))
        bufs.reset()
        launch, _ = self.p.prepare(bufs, config)
        return measure(launch, self.stream, flush, carry=carry, **how)

    def recheck(self, usable: list) -> bool:
        """Check every usable configuration again after timing (for the providers that ask for
        it); False, the row failed, when one fails now."""
        self.report("re-check after timing")
        for config in usable if self.p.recheck_after_timing else []:
            if not self.checker(self.kept, config, "after timing", self.stream):
                self.row.status, self.row.reason = "failed", "passed before timing but failed after it"
                return False
        self.spent("re-check")
        return True

    def free_kept(self) -> None:
        if self.kept is not None:  # the timed case's buffers, whichever way the row ended
            self.kept.free()


def shapes_for(args: Sequence[Arg], env_of: Callable[[dict], dict]) -> Callable[[Case], dict]:
    """A case's buffer shapes, from each argument's shape expression."""
    def shapes(case: Case) -> dict:
        env = env_of(case.sizes)
        return {a.name: expr.evaluate_shape(a.shape, env) for a in args}
    return shapes

