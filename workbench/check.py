"""Check: draw inputs, run the NumPy reference, compare every output element.

A `Case` (inputs + expected outputs for one size set, seed and precision) is built on the host;
the worker uploads it, poisons the outputs with NaN, launches the version and compares every
output on the device (`DeviceComparer`); only a failing output is downloaded and compared here
(`compare`) for the details. A version passes a case only if every element of every output
satisfies |ref - out| <= atol + rtol * |ref| (non-finite reference entries skipped).

Precision: at bf16, the inputs the version reads as bf16 are rounded to bf16 *before* the
reference runs, and the reference computes in float64 on those rounded values: the tolerance
then measures the version's own arithmetic, not the rounding of its inputs. bf16 arrays are
kept as their 16 raw bits (`to_storage` / `from_storage`).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from . import expr
from .errors import ContractError
from .family import DTYPES, Arg, Family

INIT = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$")
# What a poisoned int32 output holds: a kernel that never writes an element leaves this behind.
INT_POISON = -0x5A5A5A5A


@dataclass
class Case:
    """One size set and seed: the inputs to upload and the outputs the reference computed."""

    sizes: dict[str, int]
    seed: int
    inputs: dict[str, np.ndarray]     # as the device stores them (bf16: raw bits)
    expected: dict[str, np.ndarray]   # float64 (float32 once saved)
    precision: str = "fp32"
    # In a worker, where the case is staged on the device (staging.py): {"in"/"exp": {name:
    # (address, nbytes)}}, the pristine inputs and expected outputs CaseBuffers then uses in place.
    staged: dict | None = None

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.sizes.items()) + f" seed={self.seed}"


@dataclass
class Mismatch:
    index: tuple[int, ...]
    where: str
    expected: float
    got: float


@dataclass
class ArgReport:
    name: str
    ok: bool
    max_abs: float
    max_rel: float
    bad: int
    total: int
    atol: float
    rtol: float
    first: list[Mismatch] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "max_abs": self.max_abs, "max_rel": self.max_rel,
                "bad": self.bad, "total": self.total, "atol": self.atol, "rtol": self.rtol,
                "first": [m.__dict__ | {"index": list(m.index)} for m in self.first]}


def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values as the device stores them: bf16 as raw bits, rounded to nearest even."""
    if dtype != "bf16":
        return np.asarray(values).astype(DTYPES[dtype])
    f32 = np.ascontiguousarray(values, dtype=np.float32)
    bits = f32.view(np.uint32)
    # round half to even: add 0x7FFF plus the lowest kept bit, then keep the high half. In place,
    # one temporary: an expression with six made a bf16 case's inputs 4x slower to store (the
    # references of a bench --all wait on it: 411M logits in crossentropy's).
    rounded = bits >> 16
    rounded &= 1
    rounded += 0x7FFF
    rounded += bits
    rounded >>= 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(f32)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def from_storage(stored: np.ndarray, dtype: str) -> np.ndarray:
    """The values of a stored array (bf16 bits widened to float32; others as they are)."""
    if dtype != "bf16":
        return stored
    wide = np.asarray(stored, dtype=np.uint16).astype(np.uint32)
    wide <<= 16
    return wide.view(np.float32)


def draw(arg: Arg, shape: tuple[int, ...], env: Mapping[str, Any], rng: np.random.Generator) -> np.ndarray:
    """Draw one input as its contract's `init` says: normal(mu, sigma), uniform(lo, hi),
    randint(lo, hi) (hi exclusive), constant(x); `derived` inputs are left for `prepare`."""
    if arg.init == "derived":
        return np.zeros(shape, dtype=np.float32 if arg.dtype == "bf16" else arg.np_dtype)
    m = INIT.match(arg.init or "")
    if not m:
        raise ContractError(f"input {arg.name}: cannot read init {arg.init!r} "
                            f"(normal(mu, sigma), uniform(lo, hi), randint(lo, hi), constant(x), derived)")
    kind, params = m.group(1), m.group(2).strip()
    values = expr.evaluate(f"({params},)", env) if params else ()
    # float32 inputs are drawn in float32 (4x faster for normal, 9x for uniform, than drawing
    # float64 and narrowing): the draws were a large part of the references' time (AdamW's 124M
    # parameters, the classifier's 823M logits).
    single = np.dtype(np.float32 if arg.dtype == "bf16" else arg.np_dtype) == np.float32
    if kind == "normal":
        mu, sigma = (values + (0.0, 1.0)[len(values):])[:2]
        if single:
            out = rng.standard_normal(shape, dtype=np.float32)
            out *= np.float32(sigma)
            out += np.float32(mu)
        else:
            out = rng.normal(mu, sigma, size=shape)
    elif kind == "uniform":
        lo, hi = (values + (-1.0, 1.0)[len(values):])[:2]
        if single:
            out = rng.random(shape, dtype=np.float32)
            out *= np.float32(hi - lo)
            out += np.float32(lo)
            if hi > lo:  # [lo, hi), as uniform() is: lo + (hi - lo) * r may round up to hi
                np.minimum(out, np.nextafter(np.float32(hi), np.float32(lo)), out=out)
        else:
            out = rng.uniform(lo, hi, size=shape)
    elif kind == "randint":
        lo, hi = values
        out = rng.integers(int(lo), int(hi), size=shape)
    elif kind == "constant":
        out = np.full(shape, values[0])
    else:
        raise ContractError(f"input {arg.name}: unknown init {kind!r}")
    return out.astype(np.float32 if arg.dtype == "bf16" else arg.np_dtype, copy=False)


def _call_with(fn, available: Mapping[str, Any]):
    """Call `fn` passing the names it asks for from `available` (inputs, sizes, params)."""
    sig = inspect.signature(fn)
    kwargs = {}
    for p in sig.parameters.values():
        if p.name in available:
            kwargs[p.name] = available[p.name]
        elif p.default is inspect.Parameter.empty:
            raise ContractError(f"{fn.__module__}.{fn.__name__}() asks for {p.name!r}, which is "
                                f"neither an input, a size nor a param ({', '.join(available)})")
    return fn(**kwargs)


def make_inputs(family: Family, sizes: Mapping[str, int], seed: int, precision: str = "fp32") -> dict[str, np.ndarray]:
    """The inputs as the device stores them at `precision` (same draws at every precision: a bf16
    case holds the fp32 case's values rounded). Derived inputs are computed from the rounded ones."""
    env = family.env(sizes)
    rng = np.random.default_rng(seed)
    args = {a.name: a for a in family.args_for(precision)}
    stored: dict[str, np.ndarray] = {}  # the bf16 inputs' bits, kept from their rounding
    inputs = {a.name: draw(a, family.shape(a, sizes), env, rng) for a in args.values() if a.is_input}
    inputs = {k: _round(v, args[k].dtype, stored, k) for k, v in inputs.items()}
    if family.prepare:
        prepare = getattr(family.reference_module, family.prepare)
        changed = _call_with(prepare, {**env, **inputs, "rng": rng})
        for name, value in changed.items():
            arg = args[name] if name in args else family.arg(name)
            wide = np.float32 if arg.dtype == "bf16" else arg.np_dtype
            inputs[name] = _round(np.ascontiguousarray(value, dtype=wide).reshape(family.shape(arg, sizes)), arg.dtype,
                                  stored, name)
    return {k: stored[k] if args[k].dtype == "bf16" else v for k, v in inputs.items()}


def _round(values: np.ndarray, dtype: str, stored: dict, name: str) -> np.ndarray:
    """float32 values rounded to what a bf16 buffer can hold (still float32); their bits go to
    stored[name] (rounding them again to store them would give the same bits)."""
    if dtype != "bf16":
        return values
    stored[name] = to_storage(values, "bf16")
    return from_storage(stored[name], "bf16")


def run_reference(family: Family, sizes: Mapping[str, int], inputs: Mapping[str, np.ndarray],
                  precision: str = "fp32") -> dict[str, np.ndarray]:
    """The reference in float64 on copies of the inputs (as stored: bf16 bits are widened);
    returns every output by name."""
    env = family.env(sizes)
    dtypes = {a.name: a.dtype for a in family.args_for(precision)}
    values = {k: from_storage(v, dtypes.get(k, "f32")) for k, v in inputs.items()}
    wide = {k: (v.astype(np.float64) if v.dtype.kind == "f" else v.astype(np.int64)) for k, v in values.items()}
    result = _call_with(family.reference, {**env, **wide})
    if not isinstance(result, dict):
        raise ContractError(f"{family.name}: the reference must return a dict of outputs by name")
    expected = {}
    for arg in family.args_for(precision):
        if not arg.is_output:
            continue
        if arg.name not in result:
            raise ContractError(f"{family.name}: the reference returned no {arg.name!r}")
        shape = family.shape(arg, sizes)
        value = np.asarray(result[arg.name], dtype=np.float64)
        if value.size != int(np.prod(shape)):
            raise ContractError(f"{family.name}: the reference's {arg.name} has {value.size} elements, "
                                f"the contract says {shape}")
        expected[arg.name] = value.reshape(shape)
    return expected


def make_case(family: Family, sizes: Mapping[str, int], seed: int, precision: str = "fp32") -> Case:
    inputs = make_inputs(family, sizes, seed, precision)
    return Case(dict(sizes), seed, inputs, run_reference(family, sizes, inputs, precision), precision)


def poison(arg: Arg, shape: tuple[int, ...]) -> np.ndarray:
    """What an output buffer holds before a launch: NaN (or a sentinel for integers)."""
    if arg.dtype in ("f32", "bf16"):
        return to_storage(np.full(shape, np.nan, dtype=np.float32), arg.dtype)
    return np.full(shape, INT_POISON, dtype=arg.np_dtype)


def dim_names(arg: Arg) -> list[str]:
    """Coordinate names for an argument's axes: 'B, T, C' -> ['b', 't', 'c']."""
    parts = [p.strip() for p in arg.shape.split(",") if p.strip()]
    return [p.lower() if p.isidentifier() else f"i{k}" for k, p in enumerate(parts)]


def compare(arg: Arg, expected: np.ndarray, got: np.ndarray, atol: float, rtol: float,
            show: int = 5) -> ArgReport:
    """`got` holds values (bf16 already widened: see from_storage)."""
    got64 = np.asarray(got, dtype=np.float64).reshape(expected.shape)
    finite = np.isfinite(expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.abs(got64 - expected)
        # NaN in `got` makes the comparison False, so an unwritten (poisoned) element fails.
        bad = finite & ~(diff <= atol + rtol * np.abs(expected))
        rel = np.where(finite, diff / np.maximum(np.abs(expected), 1e-30), 0.0)
    diff_f = np.where(finite, diff, 0.0)
    n_bad = int(bad.sum())
    max_abs = float(np.nanmax(diff_f)) if diff_f.size and not np.isnan(diff_f).all() else 0.0
    max_rel = float(np.nanmax(rel)) if rel.size and not np.isnan(rel).all() else 0.0
    if np.isnan(diff_f).any():
        max_abs = max_rel = float("nan")
    report = ArgReport(arg.name, n_bad == 0, max_abs, max_rel, n_bad, int(expected.size), atol, rtol)
    if n_bad:
        names = dim_names(arg)
        for flat in np.flatnonzero(bad)[:show]:
            idx = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
            where = "(" + ", ".join(f"{n}={i}" for n, i in zip(names, idx)) + ")"
            report.first.append(Mismatch(idx, where, float(expected[idx]), float(got64[idx])))
    return report


def compare_all(args: list[Arg], tolerance, case: Case, outputs: Mapping[str, np.ndarray]) -> list[ArgReport]:
    """Compare each of `args` (outputs, as values) with the case's expected values;
    `tolerance(arg, sizes)` gives (atol, rtol) at the case's sizes."""
    return [compare(arg, case.expected[arg.name], outputs[arg.name], *tolerance(arg, case.sizes)) for arg in args]


def save_case(case: Case, folder) -> None:
    """Write a case as .npy files a child process can memory-map (expected kept as float32:
    its rounding, 6e-8 relative, is far below every family's tolerance)."""
    import json
    from pathlib import Path
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in case.inputs.items():
        np.save(folder / f"in_{name}.npy", value)
    for name, value in case.expected.items():
        np.save(folder / f"exp_{name}.npy", value.astype(np.float32))
    (folder / "meta.json").write_text(json.dumps({"sizes": case.sizes, "seed": case.seed, "precision": case.precision}))


class _OnDisk(Mapping):
    """A case's arrays by name, each memory-mapped the first time it is asked for: a worker whose
    case is staged on the device never reads its inputs, and its expected values only when a check
    fails (opening them all cost ~90 ms per version in a bench)."""

    def __init__(self, paths: dict):
        self._paths, self._open = paths, {}

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._open:
            self._open[name] = np.load(self._paths[name], mmap_mode="r")
        return self._open[name]

    def __contains__(self, name) -> bool:
        return name in self._paths

    def __iter__(self):
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def load_case(folder) -> Case:
    import json
    from pathlib import Path
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    files = sorted(folder.glob("*_*.npy"))
    inputs = _OnDisk({p.stem[3:]: p for p in files if p.name.startswith("in_")})
    expected = _OnDisk({p.stem[4:]: p for p in files if p.name.startswith("exp_")})
    return Case(meta["sizes"], meta["seed"], inputs, expected, meta.get("precision", "fp32"))


# -- on the device -------------------------------------------------------------------------------
# A family like softmax has 412M output elements: comparing them in NumPy at every block size and
# seed would dominate a bench. The same test runs on the GPU; only a failing output is downloaded,
# to report its first mismatches in the op's coordinates with `compare` above.
COMPARE_KERNEL = r"""
struct Bf16Bits {  // a bf16 read as its bits, widened exactly to float (no cuda_bf16.h needed)
    unsigned short bits;
    __device__ operator double() const { return (double)__uint_as_float((unsigned int)bits << 16); }
};

template <typename T>
__device__ void compare_elements(const T* got, const float* expected, long long n, double atol,
                                 double rtol, unsigned long long* bad, unsigned int* max_abs,
                                 unsigned int* max_rel) {
    unsigned long long my_bad = 0;
    float my_abs = 0.0f, my_rel = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double e = expected[i];
        if (!isfinite(e)) continue;
        double d = fabs((double)got[i] - e);
        if (!(d <= atol + rtol * fabs(e))) my_bad++;  // NaN fails this test too
        if (d == d) {
            my_abs = fmaxf(my_abs, (float)d);
            my_rel = fmaxf(my_rel, (float)(d / fmax(fabs(e), 1e-30)));
        }
    }
    for (int o = 16; o > 0; o /= 2) {
        my_bad += __shfl_xor_sync(0xffffffff, my_bad, o);
        my_abs = fmaxf(my_abs, __shfl_xor_sync(0xffffffff, my_abs, o));
        my_rel = fmaxf(my_rel, __shfl_xor_sync(0xffffffff, my_rel, o));
    }
    if (threadIdx.x % 32 == 0) {
        if (my_bad) atomicAdd(bad, my_bad);
        atomicMax(max_abs, __float_as_uint(my_abs));  // non-negative floats order like their bits
        atomicMax(max_rel, __float_as_uint(my_rel));
    }
}

extern "C" __global__ void compare_f32(const float* got, const float* expected, long long n, double atol,
                                       double rtol, unsigned long long* bad, unsigned int* max_abs,
                                       unsigned int* max_rel) {
    compare_elements<float>(got, expected, n, atol, rtol, bad, max_abs, max_rel);
}

extern "C" __global__ void compare_bf16(const unsigned short* got, const float* expected, long long n, double atol,
                                        double rtol, unsigned long long* bad, unsigned int* max_abs,
                                        unsigned int* max_rel) {
    compare_elements<Bf16Bits>(reinterpret_cast<const Bf16Bits*>(got), expected, n, atol, rtol, bad, max_abs, max_rel);
}

extern "C" __global__ void compare_i32(const int* got, const float* expected, long long n, double atol,
                                       double rtol, unsigned long long* bad, unsigned int* max_abs,
                                       unsigned int* max_rel) {
    compare_elements<int>(got, expected, n, atol, rtol, bad, max_abs, max_rel);
}
"""


class DeviceComparer:
    """Counts mismatches and the largest errors of a device output against a device copy of the
    expected values, with the same rule as `compare`."""

    def __init__(self):
        import pycuda.driver as drv
        from .compile import harness_module
        self.drv = drv
        module = harness_module(COMPARE_KERNEL)
        self.kernels = {dt: module.get_function(f"compare_{dt}") for dt in ("f32", "i32", "bf16")}
        for k in self.kernels.values():
            k.prepare("PPqddPPP")
        self.stats = drv.mem_alloc(16)
        sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.grid = (sms * 4, 1, 1)

    def __call__(self, arg: Arg, got_ptr: int, expected_ptr: int, n: int, atol: float, rtol: float) -> ArgReport:
        self.drv.memset_d32(self.stats, 0, 4)
        s = int(self.stats)
        self.kernels[arg.dtype].prepared_call(self.grid, (256, 1, 1), np.uintp(got_ptr), np.uintp(expected_ptr),
                                              np.int64(n), float(atol), float(rtol), np.uintp(s),
                                              np.uintp(s + 8), np.uintp(s + 12))
        host = np.empty(4, dtype=np.uint32)
        self.drv.memcpy_dtoh(host, self.stats)
        bad = int(host[:2].view(np.uint64)[0])
        max_abs, max_rel = (float(x) for x in host[2:].view(np.float32))
        return ArgReport(arg.name, bad == 0, max_abs, max_rel, bad, n, atol, rtol)
