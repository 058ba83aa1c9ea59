"""Time: CUDA events, warm-up, a cold and clean L2 before every timed launch, its own write-backs
charged to it, median with spread.

`measure` times any callable that enqueues work on a stream (a version's plan, a PyTorch
baseline on the same stream). Around each timed launch:

* before it, `L2Flush` writes, then reads, a buffer twice the size of L2, so the launch starts
  with a cold L2 holding only clean lines: it pays for its own reads from DRAM and for no one
  else's write-backs (a plain memset flush, the common choice, leaves L2 full of dirty lines
  whose write-back lands inside the next launch: on the H100 it added ~4.7 us to a 17.7 us
  layernorm, bytes the kernel never touched);
* after it, still inside the timed window, a second read of that buffer (the "drain") evicts
  whatever the launch left dirty in L2, so its output is charged as written to DRAM; without it
  ncu showed a 25 MB layernorm output only 5-50% written back when the kernel ended, and
  bandwidth figures above the copy ceiling. The drain's own time, measured alone the same way,
  is subtracted.

The flush also keeps the GPU busy while the host enqueues the launch, hiding launch cost.
Launches repeat until the median is pinned down (its 95% confidence interval within +-1%,
`median_ci`) or the time budget is spent; the result is the median, that interval, and the
20th-80th percentile band of single launches (the spread, which more samples do not narrow).

`copy_ceiling` measures the device's practical bandwidth (a large device-to-device copy,
counting bytes read plus written) once per device and caches it: every "% of ceiling" figure is
against this measurement, never a datasheet number; `matmul_peak` does the same for the matmul
rates (FP32, TF32, bf16). A copy of a family's own byte count, timed with `measure` like a version,
is a row of every memory-bound table (providers.CopyProvider): the practical ceiling at that size.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .compile import CACHE_DIR
from .files import write_text_atomic
from .random_operands import random_fill
from .results import Timing

COPY_BYTES = 1 << 30  # 1 GiB each way: far beyond any L2


PRECISION = 0.01  # stop once the median is known to +-1% (95% confidence), or the budget is spent
SLOW_S = 0.005    # a launch this long gets one warm-up and fewer samples (see measure)


def median_ci(sorted_us: np.ndarray) -> float:
    """Half the width of a 95% confidence interval for the median, relative to it.

    Distribution-free: the interval runs between the order statistics n/2 -+ 1.96 sqrt(n)/2 (the
    count of samples below the true median is Binomial(n, 1/2)). It narrows as 1/sqrt(n) while the
    spread of single launches (p20-p80, `noise`) does not: on an H100 that spread stays at 5-7%
    however long one times, so it cannot say when to stop; this can."""
    n = sorted_us.size
    med = float(np.median(sorted_us))
    if n < 2 or med <= 0:
        return float("inf")
    k = 1.96 * np.sqrt(n) / 2
    lo, hi = max(0, int(np.floor(n / 2 - k))), min(n - 1, int(np.ceil(n / 2 + k)))
    return float(sorted_us[hi] - sorted_us[lo]) / 2 / med


def summarize(samples_us: list[float]) -> Timing:
    a = np.sort(np.asarray(samples_us, dtype=np.float64))
    med = float(np.median(a))
    p20, p80 = (float(x) for x in np.percentile(a, [20, 80]))
    ci = median_ci(a)
    return Timing(med, p20, p80, int(a.size), (p80 - p20) / med if med > 0 else 0.0,
                  ci=ci if np.isfinite(ci) else None)


READ_KERNEL = r"""
extern "C" __global__ void read_all(const float4* __restrict__ x, long long n, float* sink) {
    float s = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float4 v = x[i];
        s += (v.x + v.y) + (v.z + v.w);
    }
    if (s == -1.0f) sink[0] = s;  // never true for the values written: keeps the loads alive
}
"""


class L2Flush:
    """Write, then read, a buffer of twice the device's L2: L2 ends up cold *and clean*."""

    def __init__(self):
        import pycuda.driver as drv
        from .compile import harness_module
        dev = drv.Context.get_device()
        l2 = dev.get_attribute(drv.device_attribute.L2_CACHE_SIZE)
        self.words = (max(2 * l2, 1 << 20) // 16) * 4
        self.buf = drv.mem_alloc(self.words * 4)
        self.sink = drv.mem_alloc(4)
        self.read = harness_module(READ_KERNEL).get_function("read_all")
        self.read.prepare("PqP")
        self.grid = (dev.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT) * 4, 1, 1)
        self._drv = drv

    def __call__(self, stream) -> None:
        self._drv.memset_d32_async(self.buf, 0x3F800000, self.words, stream)  # 1.0f
        self.drain(stream)

    def drain(self, stream) -> None:
        """Read the buffer: evicts (and so writes back) whatever is dirty in L2."""
        self.read.prepared_async_call(self.grid, (512, 1, 1), stream, np.uintp(int(self.buf)),
                                      np.int64(self.words // 4), np.uintp(int(self.sink)))


BUSY_KERNEL = r"""
extern "C" __global__ void busy_wait(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


class Busy:
    """Keeps the GPU busy for a few tens of microseconds, without touching memory: stands in
    for the flush when timing warm (unflushed) launches, so the host's launch cost stays hidden
    in both modes and only the cache state differs."""

    def __init__(self, ns: int = 40_000):
        from .compile import harness_module
        self.fn = harness_module(BUSY_KERNEL).get_function("busy_wait")
        self.fn.prepare("Q")
        self.ns = np.uint64(ns)

    def __call__(self, stream) -> None:
        self.fn.prepared_async_call((1, 1, 1), (1, 1, 1), stream, self.ns)


def _warm_up(launch, before, stream, warmup: int) -> float:
    """`warmup` launches (one after the first when that is slow); the seconds of the second."""
    before(stream)
    launch(stream)  # the first launch may load modules or libraries: not timed at all
    stream.synchronize()
    t0 = time.perf_counter()
    before(stream)
    launch(stream)
    stream.synchronize()
    per_launch = time.perf_counter() - t0
    if per_launch < SLOW_S:
        for _ in range(warmup - 2):
            before(stream)
            launch(stream)
        stream.synchronize()
    return per_launch


def measure(launch: Callable[[object], None], stream, flush: L2Flush | None, *,
            budget_s: float = 0.4, min_reps: int = 15, max_reps: int = 400,
            precision: float = PRECISION, warmup: int = 3, batch: int = 8,
            carry: dict | None = None, fewest: int = 5) -> Timing:
    """Median time of `launch(stream)` in microseconds.

    `carry`: a dict this call keeps its samples in; given the same dict again (the same launch,
    timed the same way), a call goes on from them instead of starting over: a front-runner's full
    measurement adds to its screening samples.

    With an L2Flush, each sample is a pair: [flush, drain] and [flush, launch, drain], timed back
    to back; the sample is their difference, so drift between them cancels. A launch too short to
    resolve that way (median difference not above zero) is timed flushed but undrained instead,
    and says so (`drained` False). Without a flush, a busy-wait kernel runs before each launch so
    host launch latency stays hidden, and the launch runs warm.

    A slow launch (over SLOW_S: a naive matmul, tens of ms) is steady: one warm-up after the first
    launch, and a few samples within the budget say as much as fifteen, which would take seconds
    each; never fewer than `fewest` (5; a screening, which only ranks, asks for 3)."""
    import pycuda.driver as drv
    before = flush or Busy()
    per_launch = _warm_up(launch, before, stream, warmup)
    if per_launch * min_reps > budget_s:
        min_reps = max(fewest, min(min_reps, int(budget_s / per_launch)))
        batch = min(batch, min_reps)
    events = [(drv.Event(), drv.Event()) for _ in range(2 * batch)]

    def timed(bodies) -> list[float]:
        for (s, e), body in zip(events, bodies):
            before(stream)
            s.record(stream)
            body(stream)
            e.record(stream)
        events[len(bodies) - 1][1].synchronize()
        return [e.time_since(s) * 1000.0 for s, e in events[:len(bodies)]]

    def sample_loop(bodies_for, combine, samples: list[float]) -> list[float]:
        start = time.perf_counter()
        while len(samples) < max_reps:
            n = min(batch, max_reps - len(samples))
            samples += combine(timed(bodies_for(n)), n)
            if len(samples) >= min_reps:
                t = summarize(samples)
                if (t.ci is not None and t.ci <= precision) or time.perf_counter() - start > budget_s:
                    break
        return samples

    carry = {} if carry is None else carry
    if flush is None:
        return summarize(sample_loop(lambda n: [launch] * n, lambda t, n: t, carry.setdefault("warm", [])))

    def drained(s):
        launch(s)
        flush.drain(s)
    drains: list[float] = carry.setdefault("drains", [])

    def pairs(t, n):  # t = [drain, launch+drain, drain, launch+drain, ...]
        drains.extend(t[0::2])
        # A launch cannot take negative time: where the drain alone happened to be slower than
        # launch + drain (noise larger than the launch), the sample is zero, not negative.
        return [max(0.0, b - a) for a, b in zip(t[0::2], t[1::2])]
    if not carry.get("undrained"):
        samples = sample_loop(lambda n: [flush.drain, drained] * min(n, batch), pairs, carry.setdefault("drained", []))
        result = summarize(samples)
        result.drain_us = float(np.median(drains))
        if result.median_us > 0:
            return result
        carry["undrained"] = True  # too short to resolve with the drain: from now on, flushed only
    undrained = summarize(sample_loop(lambda n: [launch] * n, lambda t, n: t, carry.setdefault("flushed", [])))
    undrained.drain_us = float(np.median(drains))
    undrained.drained = False
    return undrained


COPY_KERNEL = r"""
extern "C" __global__ void copy_float4(const float4* __restrict__ src, float4* __restrict__ dst, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dst[i] = src[i];
}
"""


def device_key() -> dict:
    import pycuda.driver as drv
    dev = drv.Context.get_device()
    return {"name": dev.name(), "pci": dev.pci_bus_id(), "driver": drv.get_driver_version()}


def copy_ceiling(refresh: bool = False) -> dict:
    """Measured copy bandwidth in GB/s (read + write), cached per device."""
    import pycuda.driver as drv
    from .compile import harness_module
    key = device_key()
    cache = CACHE_DIR / "ceiling.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    name = f"{key['name']}|{key['pci']}|{key['driver']}"
    if name in known and not refresh:
        return known[name]
    stream = drv.Stream()
    src, dst = drv.mem_alloc(COPY_BYTES), drv.mem_alloc(COPY_BYTES)
    drv.memset_d32(src, 0x3F800000, COPY_BYTES // 4)
    fn = harness_module(COPY_KERNEL).get_function("copy_float4")
    fn.prepare("PPq")
    n4 = COPY_BYTES // 16
    sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
    kernel = measure(lambda s: fn.prepared_async_call((sms * 8, 1, 1), (512, 1, 1), s, np.uintp(int(src)), np.uintp(int(dst)), np.int64(n4)),
                     stream, None, budget_s=1.0, min_reps=20)
    memcpy = measure(lambda s: drv.memcpy_dtod_async(dst, src, COPY_BYTES, s), stream, None,
                     budget_s=1.0, min_reps=20)
    best = min(kernel.median_us, memcpy.median_us)
    result = {"gbps": 2 * COPY_BYTES / (best * 1e-6) / 1e9,
              "kernel_gbps": 2 * COPY_BYTES / (kernel.median_us * 1e-6) / 1e9,
              "memcpy_gbps": 2 * COPY_BYTES / (memcpy.median_us * 1e-6) / 1e9,
              "bytes": 2 * COPY_BYTES, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    src.free()
    dst.free()
    known[name] = result
    cache.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(cache, json.dumps(known, indent=1))
    return result


PEAK_N = 8192
# The peaks' cache. Until 2026-12-01 peak.json kept 1-second bursts on constant operands, which
# on an H200 read 894 TFLOP/s bf16 where the same GEMM on random operands settles at ~659 after a
# few seconds (results/h200-session13-2026-12-01, peak_probe): a new name, so no burst is read back.
PEAK_FILE = "matmul_peak.json"
PEAK_SETTLE_S, PEAK_MEASURE_S = 3.0, 2.0


def cached_peaks() -> dict[str, float]:
    """The matmul peaks measured on this device so far (`workbench doctor` measures them)."""
    return peaks_for(device_key())


def peaks_for(key: dict, cache_dir: Path | None = None) -> dict[str, float]:
    """The peaks kept for the device `key` names (name, pci, driver: a probe's device dict will
    do), without a CUDA context."""
    cache = (cache_dir or CACHE_DIR) / PEAK_FILE
    known = json.loads(cache.read_text()) if cache.exists() else {}
    prefix = f"{key.get('name')}|{key.get('pci')}|{key.get('driver')}|"
    return {k[len(prefix):]: v for k, v in known.items() if k.startswith(prefix)}


def matmul_peak(kind: str, refresh: bool = False) -> float:
    """The dense matmul rate (TFLOP/s) this device sustains through cuBLASLt at 8192^3, for kind
    "fp32" (CUDA cores), "tf32" or "bf16" (tensor cores), measured once and cached like the copy
    ceiling: MFU and roofline figures are against what this GPU does, never a table.

    Sustained, on random operands: the GEMM runs back to back for PEAK_SETTLE_S first (a GPU at
    its power limit lowers its clocks within seconds, as it does under a training run), then the
    median over PEAK_MEASURE_S of five-launch visits between CUDA events is kept. A burst on a
    cold GPU, or constant operands, reads higher than anything a run can reach."""
    import pycuda.driver as drv

    from . import library_calls
    key = device_key()
    name = f"{key['name']}|{key['pci']}|{key['driver']}|{kind}"
    cache = CACHE_DIR / PEAK_FILE
    known = json.loads(cache.read_text()) if cache.exists() else {}
    if name not in known or refresh:
        n = PEAK_N
        itemsize = 2 if kind == "bf16" else 4
        a, b, c = (drv.mem_alloc(n * n * itemsize) for _ in range(3))
        stream = drv.Stream()
        try:
            random_fill(int(a), n * n * itemsize, itemsize, seed=1)
            random_fill(int(b), n * n * itemsize, itemsize, seed=2)
            call = library_calls.gemm_lt(a=int(a), b=int(b), d=int(c), m=n, n=n, k=n, tf32=kind == "tf32",
                                         dtype="bf16" if kind == "bf16" else "f32")
            start = time.perf_counter()
            while time.perf_counter() - start < PEAK_SETTLE_S:
                for _ in range(5):
                    call(stream)
                stream.synchronize()
            samples: list[float] = []
            start = time.perf_counter()
            while time.perf_counter() - start < PEAK_MEASURE_S or len(samples) < 5:
                s, e = drv.Event(), drv.Event()
                s.record(stream)
                for _ in range(5):
                    call(stream)
                e.record(stream)
                e.synchronize()
                samples.append(e.time_since(s) * 1e-3 / 5)
        finally:
            for buf in (a, b, c):
                buf.free()
        known[name] = 2 * n ** 3 / float(np.median(samples)) / 1e12
        cache.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache, json.dumps(known, indent=1))
    return known[name]
