"""The bf16 step's GEMM shapes (GPT-2 124M, B=16, T=1024): the time of the call the trainer makes
(cuBLAS's default algorithm, or cuBLASLt's first heuristic pick) against each of cuBLASLt's first
eight heuristic candidates for the same product and epilogue. Medians of 30 launches, CUDA events.
Session 12: random bf16 operands (session 10 timed constants)."""
import sys, json
import numpy as np
sys.path.insert(0, ".")
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from nvmath.bindings import cublasLt
from workbench import library_calls as lc

import os
N, C, V = int(os.environ.get("N", "16384")), 768, 50304
stream = drv.Stream()
bufs = {}
def buf(name, elems):
    if name not in bufs:
        bufs[name] = drv.mem_alloc(elems * 2)
        import cupy as cp  # random bf16 (never time on constants): normal(0, 0.05), top 16 bits of fp32
        x = (cp.random.standard_normal(elems, dtype=cp.float32) * 0.05).view(cp.uint32) >> 16
        x = x.astype(cp.uint16)
        drv.memcpy_dtod(bufs[name], x.data.ptr, elems * 2)
        del x
    return int(bufs[name])

def timed(call, reps=30):
    for _ in range(3):
        call(stream)
    ts = []
    for _ in range(reps):
        a, b = drv.Event(), drv.Event()
        a.record(stream); call(stream); b.record(stream); b.synchronize()
        ts.append(b.time_since(a) * 1000)
    return float(np.median(ts))

def lt_candidates(a, b, d, m, n, k, trans_a=False, trans_b=False, beta=0.0, bias=0, gelu=False, aux=0, dgelu=False, want=8):
    """gemm_lt's descriptor, with `want` heuristic candidates: one call per candidate."""
    handle = lc.cublaslt_handle()
    elem = lc.DATA_TYPES["bf16"]
    lda, ldb, ldd = lc._col_major(m, n, k, trans_a, trans_b, 0, 0, 0)
    Attr = cublasLt.MatmulDescAttribute
    desc = cublasLt.matmul_desc_create(lc._compute_type(False), lc.R_32F)
    dt = cublasLt.get_matmul_desc_attribute_dtype
    lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSA, dt, 1 if trans_b else 0)
    lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSB, dt, 1 if trans_a else 0)
    epilogue, pointers = lc._epilogue(bias, gelu, aux, dgelu, 0)
    if epilogue != "DEFAULT":
        lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE, dt, int(getattr(cublasLt.Epilogue, epilogue)))
    for attr, ptr in pointers:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, getattr(Attr, attr), dt, int(ptr))
    if aux:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE_AUX_LD, dt, n)
    lay = lambda r, c_, ld: cublasLt.matrix_layout_create(elem, int(r), int(c_), int(ld))
    layout_b = lay(k, n, ldb) if trans_b else lay(n, k, ldb)
    layout_a = lay(m, k, lda) if trans_a else lay(k, m, lda)
    layout_d = lay(n, m, ldd)
    pref = cublasLt.matmul_preference_create()
    lc._set(cublasLt.matmul_preference_set_attribute, pref, cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
            cublasLt.get_matmul_preference_attribute_dtype, lc.WORKSPACE)
    results = cublasLt.MatmulHeuristicResult(want)
    count = np.zeros(1, dtype=np.int32)
    cublasLt.matmul_algo_get_heuristic(handle, desc, layout_b, layout_a, layout_d, layout_d, pref, want, results.ptr, count.ctypes.data)
    scalars = np.array([1.0, beta], dtype=np.float32)
    ws = lc._workspace()
    calls = []
    for i in range(int(count[0])):
        algo = np.array(results[i]["algo"])
        def call(s, algo=algo):
            cublasLt.matmul(handle, desc, scalars.ctypes.data, int(b), layout_b, int(a), layout_a,
                            scalars.ctypes.data + 4, int(d), layout_d, int(d), layout_d, algo.ctypes.data,
                            int(ws), lc.WORKSPACE, lc._stream_handle(s))
        call.keep = (algo, scalars, results)
        calls.append(call)
    return calls

rows = []
def case(label, per_step, m, n, k, kind, **kw):
    a_el = m * k; b_el = k * n; d_el = m * n
    a, b, d = buf(f"a{label}", a_el), buf(f"b{label}", b_el), buf(f"d{label}", d_el)
    if kw.get("bias"): kw["bias"] = buf(f"bias{label}", n)
    if kw.get("aux"): kw["aux"] = buf(f"aux{label}", d_el)
    if kind == "gemm":
        now = lc.gemm(a, b, d, m, n, k, trans_a=kw.get("trans_a", False), trans_b=kw.get("trans_b", False),
                      beta=kw.get("beta", 0.0), dtype="bf16")
    else:
        now = lc.gemm_lt(a, b, d, m, n, k, dtype="bf16", **kw)
    t_now = timed(now)
    cands = [timed(c) for c in lt_candidates(a, b, d, m, n, k, **kw)]
    flops = 2 * m * n * k
    best = min(cands) if cands else None
    rows.append({"gemm": label, "per_step": per_step, "m": m, "n": n, "k": k, "call": kind, "now_us": round(t_now, 1),
                 "now_tflops": round(flops / t_now / 1e6, 1), "lt_candidates_us": [round(c, 1) for c in cands],
                 "best_us": round(best, 1) if best else None, "saved_ms_per_step": round(per_step * (t_now - best) / 1000, 3) if best else None})
    print(json.dumps(rows[-1]), flush=True)

L = 12
case("qkv fwd", L, N, 3 * C, C, "lt", trans_b=True, bias=1)
case("attproj fwd", L, N, C, C, "lt", trans_b=True, bias=1)
case("fc fwd gelu aux", L, N, 4 * C, C, "lt", trans_b=True, bias=1, gelu=True, aux=1)
case("fcproj fwd", L, N, C, 4 * C, "lt", trans_b=True, bias=1)
case("lm head fwd", 1, N, V, C, "lt", trans_b=True)
case("qkv dinp", L, N, C, 3 * C, "gemm")
case("qkv dweight", L, 3 * C, C, N, "gemm", trans_a=True, beta=1.0)
case("attproj dinp", L, N, C, C, "gemm")
case("attproj dweight", L, C, C, N, "gemm", trans_a=True, beta=1.0)
case("fc dinp", L, N, C, 4 * C, "gemm")
case("fc dweight", L, 4 * C, C, N, "gemm", trans_a=True, beta=1.0)
case("fcproj dgelu dinp", L, N, 4 * C, C, "lt", dgelu=True, aux=1)
case("fcproj dweight", L, C, 4 * C, N, "gemm", trans_a=True, beta=1.0)
case("lm head dinp", 1, N, C, V, "gemm")
case("lm head dweight", 1, V, C, N, "gemm", trans_a=True, beta=1.0)
tot_now = sum(r["per_step"] * r["now_us"] for r in rows) / 1000
tot_best = sum(r["per_step"] * min(r["now_us"], r["best_us"] or 1e9) for r in rows) / 1000
print(f"## per step: the trainer's calls {tot_now:.2f} ms; the best of each {tot_best:.2f} ms; {tot_now - tot_best:.2f} ms to gain")
