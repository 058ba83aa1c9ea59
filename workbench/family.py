"""The kernel-family contract: what a family computes, and how each of its versions is launched.

A family is a folder `kernels/<family>/` holding

* `family.toml`: the op's arguments (name, dtype, shape as an expression of the sizes, role,
  how inputs are drawn), its size parameters with default and test sizes, preconditions, the
  tolerance, the bytes (and FLOPs) that must move, the PyTorch equivalent, the NumPy reference;
* numbered versions `<n>_<slug>.cu`, each opening with a `/* ... */` comment whose body is TOML:
  the version's story (title, what changed, why it should be faster), its preconditions, the
  block sizes to sweep and the launch steps (kernels with grid/block/shared memory as expressions
  of the sizes and `block_size`, memsets, library calls).

The same objects drive the workbench's check and timing and the trainer's calls (see launch.py):
there is one description of how a version is launched. kernels/README.md documents the format.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import os
import re
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from . import expr
from .errors import ContractError, SizesError, UnknownName

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Element types of a buffer and their NumPy storage: bf16 is kept as its 16 raw bits (NumPy has no
# bfloat16); check.py converts to and from float32.
DTYPES = {"f32": "float32", "i32": "int32", "bf16": "uint16"}
FLOAT_DTYPES = ("f32", "bf16")
# The precisions a version may be written for. fp32 is every family's own (the args as declared);
# a family lists the others it supports in its contract ([precisions.bf16]).
PRECISIONS = ("fp32", "bf16")
ROLES = ("in", "out", "inout")
# Names a launch may use besides the sizes: the swept block size and the device's SM count.
DEVICE_NAMES = {"block_size", "SMS"}
VERSION_FILE = re.compile(r"^(\d+)_([A-Za-z0-9_]+)\.cu$")
HEADER = re.compile(r"\A\s*/\*(.*?)\*/", re.S)


def _want(table: Mapping, key: str, kind, where: str, default: Any = ...):
    if key not in table:
        if default is ...:
            raise ContractError(f"{where}: missing required key '{key}'")
        return default
    value = table[key]
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ContractError(f"{where}: '{key}' must be {name}, got {value!r}")
    return value


def _no_extra(table: Mapping, allowed: set[str], where: str) -> None:
    extra = set(table) - allowed
    if extra:
        raise ContractError(f"{where}: unknown key(s) {', '.join(sorted(extra))} "
                            f"(allowed: {', '.join(sorted(allowed))})")


@dataclass(frozen=True)
class Arg:
    """One argument of the op: a device buffer the kernels read and/or write."""

    name: str
    role: str
    shape: str
    dtype: str = "f32"
    init: str | None = None
    atol: float | None = None
    rtol: float | None = None

    @property
    def is_input(self) -> bool:
        return self.role in ("in", "inout")

    @property
    def is_output(self) -> bool:
        return self.role in ("out", "inout")

    @property
    def np_dtype(self) -> str:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Scratch:
    """A temporary device buffer a version needs besides the op's arguments."""

    name: str
    size: str
    dtype: str = "f32"


@dataclass(frozen=True)
class EmulatorRun:
    """One run of a version on the CPU SIMT emulator (tests/gpu_emu): the seed its case is drawn
    with, the block size, when cp.async copies land (LATE: at their wait; EARLY: at issue), the
    warp scheduler (PRIORITY: one warp races ahead; SHUFFLE: warps in step, shuffled by
    `sched_seed`), the block order (0: index order; else a seed for a shuffled one) and the
    multiprocessor count launch expressions see."""

    block_size: int | None
    seed: int = 0
    mode: str = "LATE"
    sched: str = "PRIORITY"
    order: int = 0
    sms: int = 132
    sched_seed: int = 1


@dataclass(frozen=True)
class EmulatorCases:
    """A header's [[emulate]] table: each of its runs at each of its sizes (the family's test
    sizes the version takes if `test_sizes`, and `sizes`) where `when` holds; `slow`: all of its
    cases are left to the slow test run (CI runs both), e.g. a table that adds coverage whose
    build would lengthen the quick run."""

    test_sizes: bool
    sizes: tuple[dict[str, int], ...]
    when: str | None
    runs: tuple[EmulatorRun, ...]
    slow: bool = False


@dataclass(frozen=True)
class Precision:
    """A precision the family supports besides fp32: which arguments change element type (the
    rest keep theirs: e.g. a bf16 layernorm still writes fp32 mean and rstd), the tolerance of
    the outputs that changed (the others keep their fp32 tolerance), arguments only this
    precision has (e.g. the bf16 copy of the weights a mixed-precision AdamW writes; the
    reference returns it at every precision), and optionally the bytes moved and the PyTorch
    equivalent at that precision."""

    name: str
    args: dict[str, str]               # argument -> its dtype at this precision
    atol: float
    rtol: float
    bytes: str | None = None           # default: every argument's elements at their width
    torch: str | None = None
    extra: tuple[Arg, ...] = ()
    # output -> its (atol, rtol) here; atol may be a size expression ("3.3e-4 * sqrt(N)"): the error of a
    # sum of N rounded terms grows with N (Family.tolerance evaluates it at a case's sizes)
    own: dict[str, tuple[float | str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchStep:
    """One launch step of a version: a kernel, a memset or a library call."""

    kind: str                      # "kernel" | "memset" | "library"
    name: str                      # kernel entry point, buffer to memset, or library op
    grid: tuple[str, ...] = ()
    block: tuple[str, ...] = ()
    shared: str = "0"
    args: tuple[str, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()
    value: str = "0"
    when: str | None = None

    def buffers(self, names) -> frozenset[str]:
        """The buffers of `names` (the arguments and scratch a plan is given) this step reads or writes."""
        from .library_calls import LITERAL_PARAMS
        if self.kind == "memset":
            return frozenset({self.name})
        texts = self.args if self.kind == "kernel" else [v for k, v in self.params if k not in LITERAL_PARAMS]
        return frozenset(filter(None, (buffer_named(t, names) for t in texts)))


@dataclass
class Version:
    family: "Family"
    number: int
    path: Path
    title: str
    changed: str
    why: str
    preconditions: tuple[str, ...]
    block_sizes: tuple[int | None, ...]
    scratch: tuple[Scratch, ...]
    steps: tuple[LaunchStep, ...]
    atol: float | None = None
    rtol: float | None = None
    derived: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    # False for a version whose float results depend on the order atomics land in: it gives
    # slightly different bits from run to run. `train --deterministic` never uses one.
    deterministic: bool = True
    # A named alternative a user chooses explicitly rather than the fastest-wins default: "tf32"
    # (tensor cores on fp32 data: TF32's rounding), "cudnn" (a library's kernel). promote keeps it
    # as the family's `@variant` entry, never as the family's own.
    variant: str | None = None
    # The version this one builds on (its story is told against it; `workbench diff` compares
    # with it by default); 0 for a version that starts afresh, None where the header says nothing.
    builds_on: int | None = None
    # The cases tests/test_emulator.py runs on the CPU SIMT emulator (kernels/README.md).
    emulate: tuple[EmulatorCases, ...] = ()
    # The only arch whose code does the version's work (nvcc's name, e.g. "sm_90a" for wgmma), or
    # None: any. Elsewhere it is refused before a launch (what it builds there is a stub).
    arch: str | None = None

    @property
    def label(self) -> str:
        return f"{self.family.name} {self.number}"

    def arch_refusal(self, device_arch: str) -> str | None:
        """Why the version cannot run on a device that builds `device_arch`, or None."""
        if self.arch is None or self.arch == device_arch:
            return None
        return f"needs {self.arch} code (its header's arch), and this device builds {device_arch}"

    @property
    def args(self) -> list[Arg]:
        """The op's arguments with their element types at this version's precision."""
        return self.family.args_for(self.precision)

    @property
    def source(self) -> str:
        return self.path.read_text()

    @property
    def kernels(self) -> list[str]:
        return sorted({s.name for s in self.steps if s.kind == "kernel"})

    @property
    def library_ops(self) -> list[str]:
        """The library calls its steps name (library_calls.py: gemm, gemm_lt, sdpa_cudnn, ...)."""
        return sorted({s.name for s in self.steps if s.kind == "library"})

    def unlisted_block_sizes(self, block_sizes) -> str | None:
        """Why these block sizes cannot be used (some are not in the header's list), or None."""
        bad = [b for b in block_sizes if b not in self.block_sizes]
        if not bad:
            return None
        return (f"{self.label} does not take block size {', '.join(map(str, bad))}: its header lists "
                f"{', '.join(map(str, self.block_sizes)) or 'none'}")

    def unmet(self, sizes: Mapping[str, int]) -> list[str]:
        """The preconditions (family's and version's) that `sizes` violate."""
        env = self.family.env(sizes)
        return [p for p in (*self.family.preconditions, *self.preconditions)
                if not expr.evaluate(p, env)]

    def tolerance(self, arg: Arg, sizes: Mapping[str, int] | None = None) -> tuple[float, float]:
        """The argument's own tolerance, else this version's, else the family's at its precision
        (at `sizes` where it depends on them: see Family.tolerance)."""
        atol, rtol = self.family.tolerance(arg, self.precision, sizes)
        if arg.atol is None and self.atol is not None:
            atol = self.atol
        if arg.rtol is None and self.rtol is not None:
            rtol = self.rtol
        return atol, rtol


@dataclass
class Family:
    name: str
    path: Path
    project: "Project"
    title: str
    summary: str
    sizes: tuple[str, ...]
    derived: dict[str, str]
    params: dict[str, float | int]
    default_sizes: dict[str, int]
    test_sizes: list[dict[str, int]]
    preconditions: tuple[str, ...]
    atol: float
    rtol: float
    bytes: str
    flops: str | None
    torch: str | None
    torch_outputs: tuple[str, ...]
    reference_name: str
    prepare: str | None
    args: tuple[Arg, ...]
    seeds: tuple[int, ...] = (0, 1, 2)
    precisions: dict[str, Precision] = field(default_factory=dict)
    default_precision = "fp32"

    # -- sizes ---------------------------------------------------------------------------
    def env(self, sizes: Mapping[str, int], block_size: int | None = None) -> dict[str, Any]:
        """Names visible to expressions: sizes, derived sizes, params and block_size."""
        env: dict[str, Any] = dict(self.params)
        env.update(sizes)
        for name, text in self.derived.items():
            env[name] = expr.evaluate(text, env)
        if block_size is not None:
            env["block_size"] = block_size
        return env

    def parse_sizes(self, text: str | None, base: Mapping[str, int] | None = None) -> dict[str, int]:
        """`B=4,T=2048,C=1024` over the defaults; a clear SizesError on anything else."""
        sizes = dict(base or self.default_sizes)
        if text:
            for part in filter(None, (p.strip() for p in text.split(","))):
                key, eq, value = part.partition("=")
                key = key.strip()
                if not eq or key not in self.sizes:
                    raise SizesError(f"bad --sizes entry {part!r}: expected NAME=INT with NAME one "
                                     f"of {', '.join(self.sizes)} (e.g. {self.format_sizes(self.default_sizes)})")
                try:
                    sizes[key] = int(value)
                except ValueError:
                    raise SizesError(f"bad --sizes entry {part!r}: {value.strip()!r} is not an integer") from None
                if sizes[key] < 1:
                    raise SizesError(f"bad --sizes entry {part!r}: sizes must be positive")
        self.check_sizes(sizes)
        if text:
            self.check_memory(sizes)
        return sizes

    def check_memory(self, sizes: Mapping[str, int]) -> None:
        """A SizesError if one case at `sizes` cannot fit this machine's memory: the reference holds
        a float64 copy of every argument on the host (a lower bound: the device copies come on top)."""
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, ValueError, OSError):
            return
        needs = 8 * sum(_prod(self.shape(a, sizes)) for a in self.args)
        if memory > 0 and needs > memory:
            raise SizesError(f"{self.name} at {self.format_sizes(sizes)}: one case needs {needs / 2**30:,.0f} GiB "
                             f"of host memory at least (a float64 copy of every argument), this machine has "
                             f"{memory / 2**30:,.0f} GiB")

    def check_sizes(self, sizes: Mapping[str, int]) -> None:
        missing = [s for s in self.sizes if s not in sizes]
        if missing:
            raise SizesError(f"{self.name}: sizes missing {', '.join(missing)}")
        env = self.env(sizes)
        failed = [p for p in self.preconditions if not expr.evaluate(p, env)]
        if failed:
            raise SizesError(f"{self.name} cannot handle {self.format_sizes(sizes)}: "
                             f"requires {' and '.join(failed)}")

    def format_sizes(self, sizes: Mapping[str, int]) -> str:
        return ",".join(f"{k}={sizes[k]}" for k in self.sizes if k in sizes)

    def shape(self, arg: Arg, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return expr.evaluate_shape(arg.shape, self.env(sizes))

    def bytes_moved(self, sizes: Mapping[str, int], precision: str = "fp32") -> int:
        """The bytes that must move: each input read once, each output written once."""
        p = self.precisions.get(precision)
        if p is None:
            return expr.evaluate_int(self.bytes, self.env(sizes), "bytes")
        if p.bytes is not None:
            return expr.evaluate_int(p.bytes, self.env(sizes), "bytes")
        itemsize = {"f32": 4, "i32": 4, "bf16": 2}
        return sum(int(_prod(self.shape(a, sizes))) * itemsize[a.dtype] * (2 if a.role == "inout" else 1)
                   for a in self.args_for(precision))

    # -- precisions ---------------------------------------------------------------------------
    def precision_names(self) -> list[str]:
        return ["fp32", *self.precisions]

    def args_for(self, precision: str = "fp32") -> list[Arg]:
        """The arguments with their element types at `precision`."""
        if precision == "fp32":
            return list(self.args)
        p = self.precisions[precision]
        return [dataclasses.replace(a, dtype=p.args[a.name]) if a.name in p.args else a
                for a in self.args] + list(p.extra)

    def tolerance(self, arg: Arg, precision: str = "fp32",
                  sizes: Mapping[str, int] | None = None) -> tuple[float, float]:
        """An output that changed type at this precision: the precision's tolerance (an extra
        argument's own, if it gives one); any other: its own, else the family's. An own atol written
        as a size expression is evaluated at `sizes` (default: the family's default sizes)."""
        p = self.precisions.get(precision)
        if p is not None and arg.name in p.own:
            atol, rtol = p.own[arg.name]
            if isinstance(atol, str):
                atol = float(expr.evaluate(atol, self.env(sizes if sizes is not None else self.default_sizes)))
            return atol, rtol
        if p is not None and arg in p.extra:
            return (arg.atol if arg.atol is not None else p.atol, arg.rtol if arg.rtol is not None else p.rtol)
        if p is not None and arg.name in p.args:  # the arg's own fp32 tolerance does not carry over
            return p.atol, p.rtol
        return (arg.atol if arg.atol is not None else self.atol, arg.rtol if arg.rtol is not None else self.rtol)

    def torch_expression(self, precision: str = "fp32") -> str | None:
        """The PyTorch equivalent at a precision: the precision's own, else the family's (given
        tensors of the precision's types); `torch = ""` in a precision table turns it off."""
        p = self.precisions.get(precision)
        own = p.torch if p is not None else None
        return (own if own is not None else self.torch) or None

    def flops_done(self, sizes: Mapping[str, int]) -> int | None:
        return None if self.flops is None else int(expr.evaluate(self.flops, self.env(sizes)))

    def arg(self, name: str) -> Arg:
        for a in self.args:
            if a.name == name:
                return a
        raise ContractError(f"{self.name}: no argument named {name!r}")

    # -- versions and reference ----------------------------------------------------------------
    @cached_property
    def versions(self) -> list[Version]:
        found: dict[int, Path] = {}
        for path in sorted(self.path.glob("*.cu")):
            m = VERSION_FILE.match(path.name)
            if not m:
                raise ContractError(f"{path}: version files are named <number>_<slug>.cu")
            n = int(m.group(1))
            if n in found:
                raise ContractError(f"{self.name}: two files claim version {n}: "
                                    f"{found[n].name} and {path.name}")
            found[n] = path
        versions = [load_version(self, n, found[n]) for n in sorted(found)]
        for v in versions:
            if v.builds_on and v.builds_on not in found:
                raise ContractError(f"{v.path}: builds_on = {v.builds_on} names no version of {self.name} "
                                    f"(versions: {', '.join(map(str, sorted(found)))})")
        return versions

    def version(self, number: int | str) -> Version:
        try:
            n = int(number)
        except (TypeError, ValueError):
            n = None
        for v in self.versions:
            if v.number == n:
                return v
        have = ", ".join(str(v.number) for v in self.versions) or "none"
        raise UnknownName(f"{self.name} has no version {number} (versions: {have})")

    @cached_property
    def reference_module(self):
        return self.project.reference_module(self.reference_name)

    @property
    def reference(self):
        """The NumPy reference: `module` or `module:function` (function defaults to module)."""
        module, _, name = self.reference_name.partition(":")
        name = name or module
        fn = getattr(self.reference_module, name, None)
        if fn is None:
            raise ContractError(f"{self.name}: references/{module}.py defines no function {name}()")
        return fn


def _prod(shape) -> int:
    return math.prod(shape)


def _sizes_table(value: Any, sizes: tuple[str, ...], where: str) -> dict[str, int]:
    if not isinstance(value, dict) or set(value) != set(sizes) or not all(
            isinstance(v, int) and v > 0 for v in value.values()):
        raise ContractError(f"{where}: expected positive integers for exactly {', '.join(sizes)}, "
                            f"got {value!r}")
    return dict(value)


def _arg(a: Any, w: str) -> Arg:
    """One argument's table: {name, role, shape, dtype, init, atol, rtol}."""
    if not isinstance(a, dict):
        raise ContractError(f"{w}: each argument is a table {{name = ..., role = ..., shape = ...}}")
    _no_extra(a, {"name", "role", "shape", "dtype", "init", "atol", "rtol"}, w)
    arg = Arg(name=_want(a, "name", str, w), role=_want(a, "role", str, w),
              shape=_want(a, "shape", str, w), dtype=_want(a, "dtype", str, w, "f32"),
              init=_want(a, "init", str, w, None), atol=_want(a, "atol", (int, float), w, None),
              rtol=_want(a, "rtol", (int, float), w, None))
    if arg.role not in ROLES:
        raise ContractError(f"{w}: role must be one of {', '.join(ROLES)}, got {arg.role!r}")
    if arg.dtype not in DTYPES:
        raise ContractError(f"{w}: dtype must be one of {', '.join(DTYPES)}, got {arg.dtype!r}")
    if arg.is_input and arg.init is None:
        raise ContractError(f"{w}: input {arg.name!r} needs an 'init' saying how it is drawn")
    return arg


def load_family(project: "Project", path: Path) -> Family:
    """The family in folder `path`, read from its family.toml and checked whole (ContractError
    naming the file and what is wrong): its fields and arguments, its size tables, every
    expression's names, its other precisions, and its own sizes against its preconditions."""
    where = f"{path / 'family.toml'}"
    data = _read_contract(path, where)
    fam = _new_family(project, path, data, where)
    _add_size_tables(fam, data, where)
    # Validate every expression now, so a typo is reported at load and not mid-benchmark.
    known = set(fam.sizes) | set(fam.derived) | set(fam.params) | DEVICE_NAMES
    for text in [*fam.derived.values(), *fam.preconditions, fam.bytes, *(a.shape for a in fam.args),
                 *([fam.flops] if fam.flops else [])]:
        unknown = expr.names(str(text)) - known
        if unknown:
            raise ContractError(f"{where}: expression {text!r} uses unknown name(s) "
                                f"{', '.join(sorted(unknown))}")
    for name in fam.torch_outputs:
        fam.arg(name)
    for pname, spec in _want(data, "precisions", dict, where, {}).items():
        _add_precision(fam, pname, spec, known, f"{where} [precisions.{pname}]")
    for sz in (fam.default_sizes, *fam.test_sizes):
        try:
            fam.check_sizes(sz)
        except SizesError as e:
            raise ContractError(f"{where}: {e}") from None
    return fam


def _read_contract(path: Path, where: str) -> dict[str, Any]:
    """The family folder's family.toml as a table, its keys the contract's own."""
    try:
        data = tomllib.loads((path / "family.toml").read_text())
    except tomllib.TOMLDecodeError as e:
        raise ContractError(f"{where}: {e}") from None
    except FileNotFoundError:
        raise ContractError(f"{path}: a family folder needs a family.toml contract") from None
    _no_extra(data, {"title", "summary", "sizes", "derived", "params", "default_sizes",
                     "test_sizes", "preconditions", "tolerance", "bytes", "flops", "torch",
                     "torch_outputs", "reference", "prepare", "args", "seeds", "precisions"}, where)
    return data


def _new_family(project: "Project", path: Path, data: dict[str, Any], where: str) -> Family:
    """The Family from the contract's fields: its sizes' names, tolerance and arguments checked
    (unique names, an output at least); its size tables not yet read."""
    sizes = tuple(_want(data, "sizes", list, where))
    if not sizes or not all(isinstance(s, str) and s.isidentifier() for s in sizes):
        raise ContractError(f"{where}: 'sizes' must list the size parameters' names")
    tol = _want(data, "tolerance", dict, where)
    _no_extra(tol, {"atol", "rtol"}, f"{where} [tolerance]")
    args = [_arg(a, f"{where} args[{i}]") for i, a in enumerate(_want(data, "args", list, where))]
    names = [a.name for a in args]
    if len(set(names)) != len(names):
        raise ContractError(f"{where}: argument names must be unique: {names}")
    if not any(a.is_output for a in args):
        raise ContractError(f"{where}: the op has no output argument")
    params = dict(_want(data, "params", dict, where, {}))
    return Family(
        name=path.name, path=path, project=project,
        title=_want(data, "title", str, where), summary=_want(data, "summary", str, where, ""),
        sizes=sizes, derived=dict(_want(data, "derived", dict, where, {})), params=params,
        default_sizes={}, test_sizes=[],
        preconditions=tuple(_want(data, "preconditions", list, where, [])),
        atol=float(_want(tol, "atol", (int, float), f"{where} [tolerance]")),
        rtol=float(_want(tol, "rtol", (int, float), f"{where} [tolerance]")),
        bytes=str(_want(data, "bytes", (str, int), where)),
        flops=None if "flops" not in data else str(data["flops"]),
        torch=_want(data, "torch", str, where, None),
        torch_outputs=tuple(_want(data, "torch_outputs", list, where, [])),
        reference_name=_want(data, "reference", str, where, path.name),
        prepare=_want(data, "prepare", str, where, None),
        args=tuple(args),
        seeds=tuple(_want(data, "seeds", list, where, [0, 1, 2])),
    )


def _add_size_tables(fam: Family, data: dict[str, Any], where: str) -> None:
    """The family's default sizes and its test sizes (one set at least), each naming every size."""
    fam.default_sizes = _sizes_table(_want(data, "default_sizes", dict, where), fam.sizes,
                                     f"{where} default_sizes")
    tests = _want(data, "test_sizes", list, where)
    if not tests:
        raise ContractError(f"{where}: 'test_sizes' must list at least one size set")
    fam.test_sizes = [_sizes_table(t, fam.sizes, f"{where} test_sizes[{i}]") for i, t in enumerate(tests)]


def _add_precision(fam: Family, pname: str, spec: Any, known: set[str], w: str) -> None:
    """One [precisions.<name>] table: the arguments it changes to another float type, its extra
    outputs, its tolerance, bytes and torch expression."""
    if pname not in PRECISIONS or pname == "fp32":
        raise ContractError(f"{w}: precision must be one of {', '.join(p for p in PRECISIONS if p != 'fp32')}")
    if not isinstance(spec, dict):
        raise ContractError(f"{w}: expected a table with args and tolerance")
    _no_extra(spec, {"args", "tolerance", "bytes", "torch", "extra"}, w)
    extra = tuple(_arg(a, f"{w} extra[{i}]") for i, a in enumerate(_want(spec, "extra", list, w, [])))
    if any(a.is_input for a in extra) or {a.name for a in extra} & {a.name for a in fam.args}:
        raise ContractError(f"{w}: extra arguments are new outputs (role out), not inputs or existing names")
    changed = _want(spec, "args", (list, dict), w)
    changed = {n: pname for n in changed} if isinstance(changed, list) else dict(changed)
    for n, dt in changed.items():
        arg = fam.arg(n)
        if arg.dtype not in FLOAT_DTYPES or dt not in FLOAT_DTYPES:
            raise ContractError(f"{w}: only float arguments change type; {n} is {arg.dtype}, asked {dt}")
    ptol = _want(spec, "tolerance", dict, w)
    # An output whose error at this precision grows with a size (a sum of N rounded terms) may be
    # given its own: tolerance = { atol = .., rtol = .., NAME = { atol = .., rtol = .. } }, its atol
    # a number or a size expression (a random walk of N roundings: "3.3e-4 * sqrt(N)").
    own = {}
    for name in set(ptol) - {"atol", "rtol"}:
        t, tw = ptol[name], f"{w} tolerance.{name}"
        if name not in changed or not fam.arg(name).is_output or not isinstance(t, dict):
            raise ContractError(f"{tw}: only an output this precision changes may have its own tolerance "
                                f"(a table {{ atol = .., rtol = .. }})")
        _no_extra(t, {"atol", "rtol"}, tw)
        atol = _want(t, "atol", (int, float, str), tw)
        if isinstance(atol, str):
            unknown = expr.names(atol) - known
            if unknown:
                raise ContractError(f"{tw}: atol {atol!r} uses unknown name(s) {', '.join(sorted(unknown))}")
        else:
            atol = float(atol)
        own[name] = (atol, float(_want(t, "rtol", (int, float), tw)))
    fam.precisions[pname] = Precision(
        pname, changed, atol=float(_want(ptol, "atol", (int, float), w)), rtol=float(_want(ptol, "rtol", (int, float), w)),
        bytes=None if "bytes" not in spec else str(spec["bytes"]), torch=_want(spec, "torch", str, w, None),
        extra=extra, own=own)
    if fam.precisions[pname].bytes:
        unknown = expr.names(fam.precisions[pname].bytes) - known
        if unknown:
            raise ContractError(f"{w}: bytes uses unknown name(s) {', '.join(sorted(unknown))}")


def _exprs(value: Any, where: str) -> tuple[str, ...]:
    """A grid/block entry: one expression or a list of up to three."""
    items = value if isinstance(value, list) else [value]
    if not 1 <= len(items) <= 3 or not all(isinstance(v, (str, int)) for v in items):
        raise ContractError(f"{where}: expected an expression or a list of 1-3 expressions")
    return tuple(str(v) for v in items)


def parse_header(path: Path) -> dict[str, Any]:
    text = path.read_text()
    m = HEADER.match(text)
    if not m:
        raise ContractError(f"{path}: a version opens with a /* ... */ comment holding its "
                            f"header (title, story, launch) as TOML")
    try:
        return tomllib.loads(m.group(1))
    except tomllib.TOMLDecodeError as e:
        raise ContractError(f"{path}: header is not valid TOML: {e}") from None


def _builds_on(h: Mapping, family: Family, number: int, where: str) -> int | None:
    """The header's builds_on: a lower version's number, 0 (it starts afresh) or absent (None).
    Whether that version exists is checked once the family's files are listed (Family.versions)."""
    builds_on = h.get("builds_on")
    if builds_on is not None and (type(builds_on) is not int or not 0 <= builds_on < number):
        raise ContractError(f"{where}: builds_on must be the number of a lower-numbered version of "
                            f"{family.name} (or 0: it starts afresh), got {builds_on!r}")
    return builds_on


def load_version(family: Family, number: int, path: Path) -> Version:
    where = str(path)
    h = parse_header(path)
    _no_extra(h, {"title", "changed", "why", "preconditions", "block_sizes", "scratch", "launch",
                  "tolerance", "derived", "precision", "deterministic", "variant", "builds_on", "emulate",
                  "arch"}, where)
    arch = _want(h, "arch", str, where, None)
    if arch is not None and not re.fullmatch(r"sm_\d+a?", arch):
        raise ContractError(f"{where}: arch must be nvcc's name of one target, e.g. \"sm_90a\"; got {arch!r}")
    precision = _want(h, "precision", str, where, "fp32")
    if precision != "fp32" and precision not in family.precisions:
        raise ContractError(f"{where}: precision {precision!r} is not one the family's contract lists "
                            f"({', '.join(family.precision_names())}): add [precisions.{precision}] to family.toml")
    derived = {k: str(v) for k, v in _want(h, "derived", dict, where, {}).items()}
    scratch = []
    for name, spec in _want(h, "scratch", dict, where, {}).items():
        if isinstance(spec, dict):
            _no_extra(spec, {"size", "dtype"}, f"{where} scratch.{name}")
            if spec.get("dtype", "f32") not in DTYPES:
                raise ContractError(f"{where} scratch.{name}: dtype must be one of {', '.join(DTYPES)}")
            scratch.append(Scratch(name, str(_want(spec, "size", (str, int), where)),
                                   _want(spec, "dtype", str, where, "f32")))
        else:
            scratch.append(Scratch(name, str(spec)))
    buffers = {a.name for a in family.args_for(precision)} | {s.name for s in scratch}
    steps = []
    for i, s in enumerate(_want(h, "launch", list, where)):
        w = f"{where} launch[{i}]"
        kinds = [k for k in ("kernel", "memset", "library") if k in s]
        if len(kinds) != 1:
            raise ContractError(f"{w}: each step names exactly one of kernel, memset, library")
        kind = kinds[0]
        when = _want(s, "when", str, w, None)
        if kind == "kernel":
            _no_extra(s, {"kernel", "grid", "block", "shared", "args", "when"}, w)
            step = LaunchStep("kernel", _want(s, "kernel", str, w), grid=_exprs(_want(s, "grid", (str, int, list), w), w),
                        block=_exprs(_want(s, "block", (str, int, list), w), w),
                        shared=str(_want(s, "shared", (str, int), w, "0")),
                        args=tuple(str(a) for a in _want(s, "args", list, w)), when=when)
        elif kind == "memset":
            _no_extra(s, {"memset", "value", "when"}, w)
            step = LaunchStep("memset", _want(s, "memset", str, w), value=str(_want(s, "value", (str, int, float), w, "0")), when=when)
            if step.name not in buffers:
                raise ContractError(f"{w}: memset of unknown buffer {step.name!r}")
        else:
            params = {k: v for k, v in s.items() if k not in ("library", "when")}
            step = LaunchStep("library", _want(s, "library", str, w), params=tuple(params.items()), when=when)
        steps.append(step)
    block_sizes = _want(h, "block_sizes", list, where, [])
    uses_block = any("block_size" in str(x) for st in steps for x in (*st.grid, *st.block, st.shared, *st.args)) \
        or any("block_size" in str(x) for x in _want(h, "derived", dict, where, {}).values())
    if uses_block and not block_sizes:
        raise ContractError(f"{where}: the launch uses block_size, so the header must list block_sizes")
    if not all(isinstance(b, int) and 0 < b <= 1024 for b in block_sizes):
        raise ContractError(f"{where}: block_sizes must be integers in 1..1024, got {block_sizes}")
    tol = _want(h, "tolerance", dict, where, {})
    v = Version(
        family=family, number=number, path=path, title=_want(h, "title", str, where),
        changed=_want(h, "changed", str, where, "").strip(), why=_want(h, "why", str, where, "").strip(),
        preconditions=tuple(_want(h, "preconditions", list, where, [])),
        block_sizes=tuple(block_sizes) or (None,), scratch=tuple(scratch), steps=tuple(steps),
        atol=tol.get("atol"), rtol=tol.get("rtol"), derived=derived, precision=precision,
        deterministic=_want(h, "deterministic", bool, where, True), variant=_want(h, "variant", str, where, None),
        builds_on=_builds_on(h, family, number, where),
        emulate=_emulate(_want(h, "emulate", list, where, []), family, tuple(block_sizes) or (None,), where),
        arch=arch)
    known = set(family.sizes) | set(family.derived) | set(family.params) | DEVICE_NAMES | set(derived)
    texts = [*v.preconditions, *(s.size for s in scratch), *derived.values()]
    for st in steps:
        texts += [*st.grid, *st.block, st.shared, st.value] + ([st.when] if st.when else [])
        for a in st.args:
            texts.append(strip_arg(a, buffers))
    for text in texts:
        if not text:
            continue
        unknown = expr.names(text) - known
        if unknown:
            raise ContractError(f"{where}: expression {text!r} uses unknown name(s) "
                                f"{', '.join(sorted(unknown))}")
    return v


RUN_WORDS = {"LATE": ("mode", "LATE"), "EARLY": ("mode", "EARLY"),
             "PRIORITY": ("sched", "PRIORITY"), "SHUFFLE": ("sched", "SHUFFLE")}
RUN_NUMBERS = {"bs": "block_size", "seed": "seed", "order": "order", "sms": "sms", "sched_seed": "sched_seed"}


def _emulator_run(text: Any, block_sizes: tuple, where: str) -> EmulatorRun:
    """'bs=128 seed=1 EARLY SHUFFLE order=5 sms=1 sched_seed=2' (any order, defaults omitted)."""
    if not isinstance(text, str):
        raise ContractError(f"{where}: a run is a string like 'bs=128 seed=0 LATE PRIORITY', got {text!r}")
    fields: dict[str, Any] = {}
    for word in text.split():
        key, _, value = word.partition("=")
        if word in RUN_WORDS:
            name, value = RUN_WORDS[word]
        elif key in RUN_NUMBERS and value.isdigit():
            name, value = RUN_NUMBERS[key], int(value)
        else:
            raise ContractError(f"{where}: run {text!r}: unknown word {word!r} (bs=N, seed=N, order=N, sms=N, "
                                f"sched_seed=N, LATE or EARLY, PRIORITY or SHUFFLE)")
        if name in fields:
            raise ContractError(f"{where}: run {text!r} gives its {name} twice")
        fields[name] = value
    fields.setdefault("block_size", block_sizes[0])
    if fields["block_size"] not in block_sizes:
        raise ContractError(f"{where}: run {text!r}: block size {fields['block_size']} is not in block_sizes")
    return EmulatorRun(**fields)


def _emulate(tables: list, family: "Family", block_sizes: tuple, where: str) -> tuple[EmulatorCases, ...]:
    """The header's [[emulate]] tables: runs = [...], and optionally sizes = [...] (size tables,
    and "test" for the family's test sizes; default ["test"]), when = "an expression of the
    sizes" and slow = true (every case in the slow test run only)."""
    out = []
    for i, t in enumerate(tables):
        w = f"{where} emulate[{i}]"
        if not isinstance(t, dict):
            raise ContractError(f"{w}: expected a table ([[emulate]])")
        _no_extra(t, {"sizes", "when", "runs", "slow"}, w)
        runs = _want(t, "runs", list, w)
        if not runs:
            raise ContractError(f"{w}: runs is empty")
        sizes = _want(t, "sizes", list, w, ["test"])
        if not sizes or sizes.count("test") > 1:
            raise ContractError(f'{w}: sizes must list size tables and at most once "test" '
                                f"(the family's test sizes)")
        listed = tuple(_sizes_table(s, family.sizes, f"{w} sizes") for s in sizes if s != "test")
        when = _want(t, "when", str, w, None)
        if when is not None and (unknown := expr.names(when) - set(family.sizes) - set(family.derived)):
            raise ContractError(f"{w}: when {when!r} uses unknown name(s) {', '.join(sorted(unknown))}")
        runs = tuple(_emulator_run(r, block_sizes, w) for r in runs)
        slow = _want(t, "slow", bool, w, False)
        out.append(EmulatorCases("test" in sizes, listed, when, runs, slow))
    return tuple(out)


ARG_TYPES = {"i32": "i", "u32": "I", "i64": "q", "u64": "Q", "f32": "f", "f64": "d"}
BUFFER_OFFSET = re.compile(r"^\s*(\w+)\s*\[(.+)\]\s*$")


def tensor_map_arg(text: str) -> tuple[str, tuple[str, ...]] | None:
    """A `tma:BUFFER, ROWS, COLS, BOX_ROWS, BOX_COLS` argument as (BUFFER, its four expressions),
    None for any other kind (workbench/tensor_maps.py says what the map is)."""
    prefix, colon, rest = str(text).strip().partition(":")
    if not colon or prefix.strip() != "tma":
        return None
    parts = tuple(p.strip() for p in rest.split(","))
    if len(parts) != 5 or not all(parts):
        raise ContractError(f"argument {text!r}: a tensor map is tma:BUFFER, ROWS, COLS, BOX_ROWS, BOX_COLS")
    return parts[0], parts[1:]


def strip_arg(text: str, buffers: set[str]) -> str:
    """The expression part of a kernel argument ('' for a plain buffer)."""
    text = text.strip()
    if text in buffers:
        return ""
    if (tma := tensor_map_arg(text)) is not None:
        if tma[0] not in buffers:
            raise ContractError(f"argument {text!r}: {tma[0]!r} is not one of the version's buffers")
        return " + ".join(f"({e})" for e in tma[1])
    m = BUFFER_OFFSET.match(text)
    if m and m.group(1) in buffers:
        return m.group(2)
    prefix, colon, rest = text.partition(":")
    if colon and prefix in ARG_TYPES:
        return rest
    return text


def buffer_named(text: Any, buffers) -> str | None:
    """The buffer a kernel argument or library parameter points into (a plain buffer name,
    `tma:BUFFER, ...` or `BUFFER[offset]`; strip_arg's other half), None for a value."""
    if not isinstance(text, str):
        return None
    s = text.strip()
    if s in buffers:
        return s
    if (tma := tensor_map_arg(s)) is not None:
        return tma[0]
    m = BUFFER_OFFSET.match(s)
    return m.group(1) if m and m.group(1) in buffers else None


class Project:
    """A folder holding kernels/ and references/ (the repository by default)."""

    def __init__(self, root: Path | str | None = None):
        import os
        self.root = Path(root or os.environ.get("WORKBENCH_ROOT") or PROJECT_ROOT).resolve()
        self.kernels_dir = self.root / "kernels"
        self.references_dir = self.root / "references"
        self._families: dict[str, Family] = {}

    def family_names(self) -> list[str]:
        if not self.kernels_dir.is_dir():
            return []
        return sorted(p.name for p in self.kernels_dir.iterdir()
                      if p.is_dir() and (p / "family.toml").exists())

    def reload(self) -> "Project":
        """A fresh view of the same project, every family and header read again (run --watch)."""
        return Project(self.root)

    def family(self, name: str) -> Family:
        if name not in self._families:
            path = self.kernels_dir / name
            if not (path / "family.toml").exists():
                have = ", ".join(self.family_names()) or "none"
                raise UnknownName(f"unknown family {name!r} (families: {have})")
            self._families[name] = load_family(self, path)
        return self._families[name]

    def families(self) -> list[Family]:
        return [self.family(n) for n in self.family_names()]

    def reference_module(self, spec: str):
        module = spec.split(":")[0]
        path = self.references_dir / f"{module}.py"
        if not path.exists():
            raise ContractError(f"reference {path} does not exist")
        if self.root == PROJECT_ROOT:
            if str(self.root) not in sys.path:
                sys.path.insert(0, str(self.root))
            return importlib.import_module(f"references.{module}")
        name = f"_wb_references_{abs(hash(str(self.root)))}_{module}"
        if name not in sys.modules:
            loader_spec = importlib.util.spec_from_file_location(name, path)
            mod = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = mod
            loader_spec.loader.exec_module(mod)
        return sys.modules[name]
