"""Session 22, call 1: what two more GEMM epilogue fusions would save at the trainer's B=32 shapes,
before writing either as a family version. Times (CUDA events, back to back, medians of 40):
  1. attproj / fcproj forward: cuBLASLt GEMM + bias (matmul_forward 8's call), against the same GEMM
     also adding the residual stream as C (beta = 1), which would leave a plain layernorm after it
     in place of fused_residual_forward (timed by `workbench run` in the call's script).
  2. qkv's weight gradient: matmul_backward 5's dweight call, against the same GEMM with cuBLASLt's
     BGRADB epilogue (the bias gradient: dout's sums over the k = N rows), fp32 bias type; checks
     the sums against NumPy.
Experiment only: the BGRADB epilogue is patched into library_calls' _epilogue here."""
import os
import sys

import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv

from workbench import library_calls as lc

B = int(os.environ.get("B", 32))
T, C = 1024, 768
N = B * T
rng = np.random.default_rng(0)


def bf16(shape, scale=1.0):
    x = (rng.standard_normal(shape, dtype=np.float32) * scale)
    return drv.to_device((x.view(np.uint32) >> 16).astype(np.uint16)), x


def time_it(fn, reps=40):
    s = drv.Stream()
    for _ in range(5):
        fn(s)
    ts = []
    for _ in range(reps):
        a, b = drv.Event(), drv.Event()
        a.record(s); fn(s); b.record(s); b.synchronize()
        ts.append(b.time_since(a) * 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[len(ts) // 10], ts[-1 - len(ts) // 10]


def show(name, r):
    print(f"{name:60s} {r[0]:8.1f} us  (p10 {r[1]:.1f}, p90 {r[2]:.1f})", flush=True)


for name, K in (("attproj", C), ("fcproj", 4 * C)):
    a, _ = bf16((N, K)); w, _ = bf16((C, K), 0.02); bias, _ = bf16((C,), 0.02)
    res, _ = bf16((N, C)); out = drv.mem_alloc(N * C * 2)
    for tune in (0, 8):
        plain = lc.gemm_lt(int(a), int(w), int(out), N, C, K, bias=int(bias), trans_b=True, dtype="bf16",
                           workspace=0, tune=tune)
        withc = lc.gemm_lt(int(a), int(w), int(out), N, C, K, bias=int(bias), c=int(res), beta=1.0,
                           trans_b=True, dtype="bf16", workspace=0, tune=tune)
        show(f"{name} B={B} tune={tune}: GEMM + bias", time_it(plain))
        show(f"{name} B={B} tune={tune}: GEMM + bias + residual (C, beta 1)", time_it(withc))

# qkv's weight gradient
OC = 3 * C
dout, dout_h = bf16((N, OC), 0.1); inp, _ = bf16((N, C)); dw, _ = bf16((OC, C), 0.02)
db = drv.mem_alloc(OC * 4)
orig = lc._epilogue


def with_bgradb(ptr, fp32):
    def patched(bias, gelu, aux, dgelu, bias_grad):
        pairs = [("BIAS_POINTER", ptr)] + ([("BIAS_DATA_TYPE", 0)] if fp32 else [])
        return "BGRADB", pairs
    return patched


for tune in (0, 8):
    plain = lc.gemm_lt(int(dout), int(inp), int(dw), OC, C, N, trans_a=True, beta=1.0, dtype="bf16", tune=tune)
    show(f"qkv dweight B={B} tune={tune}: plain", time_it(plain))
for fp32 in (True, False):
    lc._epilogue = with_bgradb(int(db), fp32)
    try:
        fused = lc.gemm_lt(int(dout), int(inp), int(dw), OC, C, N, trans_a=True, beta=1.0, dtype="bf16", tune=0)
    except Exception as e:  # noqa: BLE001
        print(f"BGRADB fp32={fp32}: {type(e).__name__}: {e}", flush=True)
        continue
    finally:
        lc._epilogue = orig
    show(f"qkv dweight B={B} tune=0: BGRADB (bias type fp32={fp32})", time_it(fused))
    s = drv.Stream(); fused(s); s.synchronize()
    got = np.empty(OC, np.float32) if fp32 else np.empty(OC, np.uint16)
    drv.memcpy_dtoh(got, db)
    if not fp32:
        got = (got.astype(np.uint32) << 16).view(np.float32)
    ref = ((dout_h.view(np.uint32) >> 16 << 16).view(np.float32)).astype(np.float64).sum(0)
    err = np.abs(got - ref)
    print(f"  BGRADB sums vs NumPy: max abs err {err.max():.3e}, max |ref| {np.abs(ref).max():.3f}, "
          f"worst rel {(err / (np.abs(ref) + 1e-3)).max():.2e}", flush=True)
