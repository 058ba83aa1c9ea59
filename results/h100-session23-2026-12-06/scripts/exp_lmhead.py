"""Session 23, call 7: the lm head's forward GEMM (N x V x C at B=32, 3.9 ms in the step against
3.2-3.3 for its two backward GEMMs of the same FLOPs). gemm_lt (tune 8) timed back to back (CUDA
events, one launch between two events, median of 40, interleaved): as the trainer calls it (a bias
epilogue on a zero vector), without the bias, and as two launches of N/2 rows or V/2 columns each."""
import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv

from workbench import library_calls as lc

N, V, C = 32 * 1024, 50304, 768
rng = np.random.default_rng(0)


def bf16(elems, scale=0.1):
    x = rng.standard_normal(elems, dtype=np.float32) * scale
    return drv.to_device((x.view(np.uint32) >> 16).astype(np.uint16))


a, w, d = bf16(N * C), bf16(V * C), drv.mem_alloc(N * V * 2)
zeros = drv.to_device(np.zeros(V, dtype=np.uint16))
opt = dict(trans_b=True, dtype="bf16", workspace=0, tune=8)
half = N // 2
variants = {
    "bias (as the trainer)": [lc.gemm_lt(int(a), int(w), int(d), N, V, C, bias=int(zeros), **opt)],
    "no bias": [lc.gemm_lt(int(a), int(w), int(d), N, V, C, **opt)],
    "two row halves, bias": [lc.gemm_lt(int(a) + i * half * C * 2, int(w), int(d) + i * half * V * 2, half, V, C,
                                        bias=int(zeros), **opt) for i in (0, 1)],
    "two column halves, bias": [lc.gemm_lt(int(a), int(w) + i * (V // 2) * C * 2, int(d) + i * (V // 2) * 2, N, V // 2, C,
                                           ldd=V, bias=int(zeros) + i * (V // 2) * 2, **opt) for i in (0, 1)],
}
s = drv.Stream()
for fns in variants.values():
    for _ in range(3):
        for f in fns:
            f(s)
times = {k: [] for k in variants}
for _ in range(40):
    for k, fns in variants.items():
        e0, e1 = drv.Event(), drv.Event()
        e0.record(s)
        for f in fns:
            f(s)
        e1.record(s)
        e1.synchronize()
        times[k].append(e1.time_since(e0) * 1e3)
flops = 2 * N * V * C
for k, t in times.items():
    m = float(np.median(t))
    print(f"{k:24s} median {m:8.1f} us  p20-p80 {np.percentile(t, 20):8.1f}-{np.percentile(t, 80):8.1f}  "
          f"{flops / m / 1e6:6.0f} TFLOP/s")
