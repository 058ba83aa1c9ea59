"""Choosing among cuBLASLt's algorithms by timing them: gemm_lt(..., tune=n).

cuBLASLt's heuristic ranks the algorithms that can run a matmul (tile shape, stages, cluster,
split-K, epilogue scheme) by a model of the device, and its first pick is not always the
fastest at a given shape: at the trainer's bf16 shapes on an H200 the best of its first eight ran
up to 8% faster than the first, alone (results/h200-session12-2026-12-01/call2). With tune = n,
gemm_lt asks for n candidates, times each at the call's exact shape, layouts and epilogue, and
keeps the fastest.

How a candidate is timed: on scratch operands of the call's extents filled with random values
(never constants: constant operands draw less power and run faster than real data), never on the
call's own buffers (a beta = 1 call would add into a gradient); two warm-up launches each, then
rounds that visit every candidate in turn, three launches between two CUDA events a visit, the
median of the rounds kept. The candidates share the clocks of the same seconds that way.

The pick is remembered per process and on disk (CACHE_DIR/gemm_tune.json, per device, driver and
cuBLASLt version), so a run that resumes, or the next run on this GPU, launches the same algorithm
and computes the same bits without timing again. Where the scratch would take more than a quarter
of the free memory, the heuristic's first pick is kept untimed."""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

from .compile import CACHE_DIR
from .files import write_text_atomic
from .random_operands import random_fill

WARMUP, ROUNDS, PER_VISIT = 2, 7, 3
_PICKS: dict[str, int] = {}


def _device_entry() -> str:
    import pycuda.driver as drv
    from nvmath.bindings import cublasLt
    dev = drv.Context.get_device()
    return f"{dev.name()}|{dev.pci_bus_id()}|{drv.get_driver_version()}|cublasLt {cublasLt.get_version()}"


def _load() -> dict:
    path = CACHE_DIR / "gemm_tune.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _remember(device: str, key: str, entry: dict) -> None:
    path = CACHE_DIR / "gemm_tune.json"
    known = _load()  # read again just before writing: another process may have added its own picks
    known.setdefault(device, {})[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(known, indent=1, sort_keys=True))


def pick(key: str, count: int, extents: dict[str, int], itemsize: int,
         launcher: Callable[[int, dict[str, int], Any], None]) -> int:
    """The index (into the heuristic's `count` candidates) of the fastest at this call, timed once
    per device (see the module's docstring). extents: the bytes of each operand the call touches
    (names are the caller's); launcher(i, pointers, stream) launches candidate i on scratch
    operands at those pointers, and raises if it cannot run."""
    if count <= 1:
        return 0
    if key in _PICKS:
        return _PICKS[key]
    device = _device_entry()
    known = _load().get(device, {}).get(key)
    if known and 0 <= known.get("pick", -1) < count and known.get("candidates") == count:
        _PICKS[key] = known["pick"]
        return known["pick"]
    import pycuda.driver as drv
    free, _ = drv.mem_get_info()
    if sum(extents.values()) > free // 4:
        _PICKS[key] = 0
        return 0
    bufs = {name: drv.mem_alloc(max(16, nbytes)) for name, nbytes in extents.items()}
    try:
        for name, nbytes in extents.items():
            random_fill(int(bufs[name]), nbytes, itemsize)
        pointers = {name: int(b) for name, b in bufs.items()}
        stream = drv.Stream()
        alive = []
        for i in range(count):
            try:
                for _ in range(WARMUP):
                    launcher(i, pointers, stream)
                stream.synchronize()
                alive.append(i)
            except Exception:  # noqa: BLE001: a candidate cuBLASLt lists but cannot launch here is passed over
                continue
        if not alive:
            _PICKS[key] = 0
            return 0
        times: dict[int, list[float]] = {i: [] for i in alive}
        for _ in range(ROUNDS):
            for i in alive:
                start, end = drv.Event(), drv.Event()
                start.record(stream)
                for _ in range(PER_VISIT):
                    launcher(i, pointers, stream)
                end.record(stream)
                end.synchronize()
                times[i].append(end.time_since(start) * 1000 / PER_VISIT)
        medians = {i: float(np.median(t)) for i, t in times.items()}
        best = min(medians, key=lambda i: medians[i])
    finally:
        for b in bufs.values():
            b.free()
    _PICKS[key] = best
    _remember(device, key, {"pick": best, "candidates": count,
                            "median_us": {str(i): round(t, 2) for i, t in medians.items()}})
    return best


def picks() -> dict[str, int]:
    """This process's picks so far, by call key (for a report)."""
    return dict(_PICKS)
