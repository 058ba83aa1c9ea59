"""Launch: turn a version's header into a ready-to-run plan on device buffers.

This is the only place that knows how a version is launched. The workbench's worker builds a
plan on its test buffers; the trainer builds one on slices of its own activations and parameters.
A plan is a list of steps (prepared kernel launches, memsets, library calls) replayed on a stream,
so it can also be captured into a CUDA graph.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from . import expr
from .errors import ContractError
from .family import ARG_TYPES, BUFFER_OFFSET, Version, tensor_map_arg

ITEMSIZE = {"f32": 4, "i32": 4, "bf16": 2}
MAX_STATIC_SHARED = 48 * 1024


class LaunchConfigError(ContractError):
    """A launch this kernel cannot take (block too large for its registers, grid too big...)."""


@dataclass(frozen=True)
class DeviceBuffer:
    """A device allocation (or a slice of one) a plan may point at: its address, size and element type."""

    ptr: int
    nbytes: int
    dtype: str = "f32"

    def at(self, offset_elems: int) -> int:
        offset = int(offset_elems) * ITEMSIZE[self.dtype]
        if not 0 <= offset <= self.nbytes:
            raise LaunchConfigError(f"offset {offset_elems} is outside a buffer of {self.nbytes} bytes")
        return self.ptr + offset


_DEVICE_ENV: dict[str, int] = {}


def device_env() -> dict[str, int]:
    """Device facts launch expressions may use: SMS, the multiprocessor count (persistent grids)."""
    if not _DEVICE_ENV:
        import pycuda.driver as drv
        dev = drv.Context.get_device()
        _DEVICE_ENV["SMS"] = dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    return _DEVICE_ENV


def launch_env(version: Version, sizes: Mapping[str, int], block_size: int | None,
               params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    env = version.family.env(sizes, block_size)
    env.update(device_env())
    env.update(params or {})
    for name, text in version.derived.items():  # the version's own names, e.g. a persistent grid
        env[name] = expr.evaluate(text, env)
    return env


def scratch_sizes(version: Version, sizes: Mapping[str, int], block_size: int | None,
                  params: Mapping[str, Any] | None = None) -> dict[str, tuple[int, str]]:
    """Bytes and dtype of each scratch buffer the version needs at these sizes."""
    env = launch_env(version, sizes, block_size, params)
    return {s.name: (max(4, expr.evaluate_int(s.size, env, f"scratch {s.name}") * ITEMSIZE[s.dtype]), s.dtype)
            for s in version.scratch}


@dataclass
class Plan:
    """The steps of one version at one size set, block size and set of buffers."""

    version: Version
    block_size: int | None
    steps: list[Callable[[Any], None]] = field(default_factory=list)
    described: list[str] = field(default_factory=list)
    # Per step: "kernel", "memset" or the library op's name, and the buffers it reads or writes (by
    # the names the plan was given: contract arguments and scratch). The trainer's second stream
    # (train/streams.py) decides from these which steps may run beside the others.
    ops: list[str] = field(default_factory=list)
    touched: list[frozenset[str]] = field(default_factory=list)

    def __call__(self, stream) -> None:
        for step in self.steps:
            step(stream)


def _resolve(text: Any, env: Mapping[str, Any], buffers: Mapping[str, DeviceBuffer]) -> tuple[str, Any]:
    """A kernel argument → (struct type char, value). Buffers become pointers."""
    if isinstance(text, bool):
        return "i", int(text)
    if isinstance(text, (int, float)):
        return ("i", text) if isinstance(text, int) else ("f", text)
    s = str(text).strip()
    if s in buffers:
        return "P", buffers[s].ptr
    if (tma := tensor_map_arg(s)) is not None:
        from . import tensor_maps
        buf = buffers[tma[0]]
        rows, cols, box_rows, box_cols = (expr.evaluate_int(e, env, f"tensor map {tma[0]}") for e in tma[1])
        if rows * cols * ITEMSIZE[buf.dtype] > buf.nbytes:
            raise LaunchConfigError(f"tensor map of {tma[0]}: {rows} x {cols} is more than its {buf.nbytes} bytes")
        return "P", tensor_maps.on_device(tensor_maps.encode(buf.ptr, rows, cols, box_rows, box_cols, buf.dtype))
    m = BUFFER_OFFSET.match(s)
    if m and m.group(1) in buffers:
        return "P", buffers[m.group(1)].at(expr.evaluate_int(m.group(2), env, "buffer offset"))
    prefix, colon, rest = s.partition(":")
    if colon and prefix in ARG_TYPES:
        value = expr.evaluate(rest, env)
        kind = ARG_TYPES[prefix]
        return kind, float(value) if kind in "fd" else int(value)
    value = expr.evaluate(s, env)
    if isinstance(value, bool):
        return "i", int(value)
    if isinstance(value, int):
        if not -2**31 <= value < 2**31:
            raise LaunchConfigError(f"argument {s!r} = {value} does not fit an int32; write i64:{s}")
        return "i", value
    return "f", float(value)


def resolve_value(text: Any, env: Mapping[str, Any], buffers: Mapping[str, DeviceBuffer]) -> Any:
    """A library-call parameter: buffers become pointers, expressions values, others pass."""
    if isinstance(text, (bool, int, float)):
        return text
    return _resolve(text, env, buffers)[1]


def _dims(texts: tuple[str, ...], env: Mapping[str, Any], what: str) -> tuple[int, int, int]:
    dims = [expr.evaluate_int(t, env, what) for t in texts]
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def build_plan(version: Version, module, sizes: Mapping[str, int], block_size: int | None,
               buffers: Mapping[str, DeviceBuffer], params: Mapping[str, Any] | None = None,
               resources: Mapping[str, Any] | None = None) -> Plan:
    """Prepare every step of `version` for these sizes, block size and buffers."""
    import pycuda.driver as drv
    from . import library_calls

    env = launch_env(version, sizes, block_size, params)
    plan = Plan(version, block_size)
    missing = [a.name for a in version.args if a.name not in buffers] + \
              [s.name for s in version.scratch if s.name not in buffers]
    if missing:
        raise ContractError(f"{version.label}: no buffer given for {', '.join(missing)}")
    for step in version.steps:
        if step.when is not None and not expr.evaluate(step.when, env):
            continue
        if step.kind == "kernel":
            launch, described = _kernel_step(version, module, step, env, buffers, resources or {}, drv)
            plan.steps.append(launch)
            plan.described.append(described)
        elif step.kind == "memset":
            buf = buffers[step.name]
            bits = _word(expr.evaluate(step.value, env), buf.dtype)
            if buf.dtype == "bf16":  # 16-bit elements: an odd count must not be rounded to words
                def memset(stream, ptr=buf.ptr, bits=bits & 0xFFFF, count=buf.nbytes // 2):
                    drv.memset_d16_async(ptr, bits, count, stream)
            else:
                def memset(stream, ptr=buf.ptr, bits=bits, count=buf.nbytes // 4):
                    drv.memset_d32_async(ptr, bits, count, stream)
            plan.steps.append(memset)
            plan.described.append(f"memset {step.name}")
        else:
            fn = library_calls.get(step.name)
            kwargs = {k: v if k in library_calls.LITERAL_PARAMS else resolve_value(v, env, buffers)
                      for k, v in step.params}
            plan.steps.append(fn(**kwargs))
            plan.described.append(f"{step.name}({', '.join(k for k, _ in step.params)})")
        # what each step is and which buffers it touches: train/streams.py orders launches by them
        plan.ops.append(step.name if step.kind == "library" else step.kind)
        plan.touched.append(step.buffers(buffers))
    if not plan.steps:
        raise LaunchConfigError(f"{version.label}: nothing to launch at {version.family.format_sizes(sizes)} "
                                f"(every step's `when` is false)")
    return plan


def _word(value: Any, dtype: str) -> int:
    """The 32-bit pattern a memset fills with: the value in the buffer's element type (bf16: twice)."""
    if dtype == "f32":
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if dtype == "bf16":
        half = struct.unpack("<I", struct.pack("<f", float(value)))[0] >> 16
        return half | (half << 16)
    return int(value) & 0xFFFFFFFF


def _kernel_step(version: Version, module, step, env, buffers, resources, drv):
    try:
        func = module.get_function(step.name)
    except drv.LogicError:
        mangled = [k for k in resources if k.startswith(f"_Z{len(step.name)}{step.name}")]
        if len(mangled) != 1:
            raise ContractError(f"{version.path.name}: no kernel named {step.name!r} in the module "
                                f"(declare it extern \"C\" __global__)") from None
        func = module.get_function(mangled[0])
    grid = _dims(step.grid, env, "grid")
    block = _dims(step.block, env, "block")
    shared = expr.evaluate_int(step.shared, env, "shared")
    threads = block[0] * block[1] * block[2]
    limit = func.get_attribute(drv.function_attribute.MAX_THREADS_PER_BLOCK)
    if threads > limit:
        raise LaunchConfigError(f"{step.name}: a block of {threads} threads exceeds this kernel's "
                                f"limit of {limit} (registers)")
    if threads < 1 or grid[1] > 65535 or grid[2] > 65535 or grid[0] >= 2**31:
        raise LaunchConfigError(f"{step.name}: invalid launch grid {grid} block {block}")
    if shared > MAX_STATIC_SHARED:
        func.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
    typed = [_resolve(a, env, buffers) for a in step.args]
    func.prepare("".join(t for t, _ in typed))
    values = [np.uintp(v) if t == "P" else v for t, v in typed]
    empty = min(grid) == 0

    def launch(stream, func=func, grid=grid, block=block, values=values, shared=shared):
        if not empty:
            func.prepared_async_call(grid, block, stream, *values, shared_size=shared)
    return launch, f"{step.name}<<<{grid}, {block}, {shared}>>>"
