"""Session 22, call 2: are the trainer's bf16 GEMMs at B=32 run with the best algorithm cuBLASLt has?
For each GEMM shape of the step (matmul_forward 8's and matmul_backward 5's calls, the dgelu call's
weight gradient), gemm_lt with tune = 0 (heuristic's first pick), 8 (the trainer's: fastest of the
first 8) and TUNE_WIDE (fastest of up to that many), each then timed back to back here (CUDA
events, one launch between two events, median of 60, the three interleaved). Counts: launches a
step. The tuner's own medians for every candidate land in the cache's gemm_tune.json."""
import os

import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv

from workbench import gemm_tuning
from workbench import library_calls as lc

B = int(os.environ.get("B", 32))
WIDE = int(os.environ.get("TUNE_WIDE", 64))
T, C, V = 1024, 768, 50304
N = B * T
rng = np.random.default_rng(0)
_bufs = {}


def buf(name, elems, scale=0.1):
    if name not in _bufs:
        x = rng.standard_normal(elems, dtype=np.float32) * scale
        _bufs[name] = drv.to_device((x.view(np.uint32) >> 16).astype(np.uint16))
    return int(_bufs[name])


fwd = dict(trans_b=True, dtype="bf16", workspace=0)
dinp = dict(dtype="bf16", workspace=0)
dw = dict(trans_a=True, beta=1.0, dtype="bf16")
# name, count a step, (m, n, k), options; operands sized by (m, k) etc.
shapes = [
    ("qkv fwd", 12, (N, 3 * C, C), fwd, True),
    ("attproj fwd", 12, (N, C, C), fwd, True),
    ("fcproj fwd", 12, (N, C, 4 * C), fwd, True),
    ("lm head fwd", 1, (N, V, C), fwd, True),
    ("qkv dinp", 12, (N, C, 3 * C), dinp, False),
    ("attproj dinp", 12, (N, C, C), dinp, False),
    ("fc dinp", 12, (N, C, 4 * C), dinp, False),
    ("lm head dinp", 1, (N, C, V), dinp, False),
    ("qkv dweight", 12, (3 * C, C, N), dw, False),
    ("attproj dweight", 12, (C, C, N), dw, False),
    ("fc dweight", 12, (4 * C, C, N), dw, False),
    ("fcproj dweight", 12, (C, 4 * C, N), dw, False),
    ("lm head dweight", 1, (V, C, N), dw, False),
]


def time_all(fns, reps=60):
    s = drv.Stream()
    for f in fns:
        for _ in range(3):
            f(s)
    ts = [[] for _ in fns]
    for _ in range(reps):
        for i, f in enumerate(fns):
            a, b = drv.Event(), drv.Event()
            a.record(s); f(s); b.record(s); b.synchronize()
            ts[i].append(b.time_since(a) * 1e3)
    return [float(np.median(t)) for t in ts]


gemm_tuning.ROUNDS = 11
tot = {0: 0.0, 8: 0.0, WIDE: 0.0}
for name, count, (m, n, k), opt, bias in shapes:
    a = buf(f"a{m}x{k}", m * k) if not opt.get("trans_a") else buf(f"at{k}x{m}", k * m)
    b = buf(f"b{n}x{k}", n * k) if opt.get("trans_b") else buf(f"b{k}x{n}", k * n)
    d = buf(f"d{m}x{n}", m * n)
    extra = {"bias": buf(f"bias{n}", n)} if bias else {}
    fns = []
    for tune in (0, 8, WIDE):
        fns.append(lc.gemm_lt(a, b, d, m, n, k, tune=tune, **opt, **extra))
    picks = {key.split(" tune=")[-1]: p for key, p in gemm_tuning.picks().items()
             if f"m={m} n={n} k={k} " in key}
    t = time_all(fns)
    flops = 2 * m * n * k
    for tune, x in zip((0, 8, WIDE), t):
        tot[tune] += count * x
    print(f"{name:16s} x{count:2d} m={m:6d} n={n:6d} k={k:6d}  first {t[0]:8.1f}  best-of-8 {t[1]:8.1f} "
          f"(pick {picks.get('8')})  best-of-{WIDE} {t[2]:8.1f} (pick {picks.get(str(WIDE))})  "
          f"TFLOP/s {flops / t[2] / 1e6:6.0f}", flush=True)
print(f"a step's GEMMs (counts above): first {tot[0] / 1e3:.2f} ms, best-of-8 {tot[8] / 1e3:.2f} ms, "
      f"best-of-{WIDE} {tot[WIDE] / 1e3:.2f} ms")
