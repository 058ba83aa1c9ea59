"""Session 24, call 1: what a bias epilogue costs cuBLASLt at the B=32 step's forward GEMM shapes
(N = 32768 rows). For each shape: the GEMM as the trainer calls it (bias, and the residual as C
where the trainer adds it), without the bias, and with a wider tuning (32 candidates). gemm_lt timed
back to back (CUDA events around one launch, median of 30, the variants interleaved)."""
import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv

from workbench import library_calls as lc

N = 32 * 1024
rng = np.random.default_rng(0)


def bf16(elems, scale=0.1):
    x = rng.standard_normal(elems, dtype=np.float32) * scale
    return drv.to_device((x.view(np.uint32) >> 16).astype(np.uint16))


def shape(name, OC, C, residual=False, gelu=False):
    a, w, d = bf16(N * C), bf16(OC * C), drv.mem_alloc(N * OC * 2)
    bias, c = bf16(OC), (bf16(N * OC) if residual else None)
    aux = drv.mem_alloc(N * OC * 2) if gelu else None
    base = dict(trans_b=True, dtype="bf16", workspace=0)
    extra = dict(c=int(c), beta=1.0) if residual else {}
    if gelu:
        extra.update(gelu=True, aux=int(aux))
    out = {}
    for tune in (8, 32):
        out[f"{name} bias tune{tune}"] = lc.gemm_lt(int(a), int(w), int(d), N, OC, C, bias=int(bias), tune=tune, **base, **extra)
        out[f"{name} nobias tune{tune}"] = lc.gemm_lt(int(a), int(w), int(d), N, OC, C, tune=tune, **base,
                                                     **({k: v for k, v in extra.items() if k in ("c", "beta")}))
    return out, 2 * N * OC * C, (a, w, d, bias, c, aux)


variants, flops, keep = {}, {}, []
for args in (("qkv", 2304, 768), ("attproj", 768, 768, True), ("fc", 3072, 768), ("fc+gelu", 3072, 768, False, True),
             ("fcproj", 768, 3072, True)):
    v, f, k = shape(*args)
    keep.append(k)
    variants.update(v)
    flops.update({n: f for n in v})
s = drv.Stream()
for f in variants.values():
    for _ in range(3):
        f(s)
times = {k: [] for k in variants}
for _ in range(30):
    for k, f in variants.items():
        e0, e1 = drv.Event(), drv.Event()
        e0.record(s)
        f(s)
        e1.record(s)
        e1.synchronize()
        times[k].append(e1.time_since(e0) * 1e3)
for k, t in times.items():
    m = float(np.median(t))
    print(f"{k:28s} median {m:8.1f} us  p20-p80 {np.percentile(t, 20):8.1f}-{np.percentile(t, 80):8.1f}  "
          f"{flops[k] / m / 1e6:6.0f} TFLOP/s")
