"""Can cuBLASLt's bias-gradient epilogues write an fp32 bias gradient from bf16 GEMMs, how exact is
it, and what does it cost? (1) DGELU_BGRAD on the fcproj input-gradient GEMM (dpre = (dout @ W) *
gelu'(pre), dbias_fc = column sums of dpre); (2) BGRADA / BGRADB on a dweight GEMM (dW += dout^T inp,
dbias = column sums of dout). Each with BIAS_DATA_TYPE unset (bf16) and CUDA_R_32F.
Timing: CUDA events, median of 20, no flush; the best of cuBLASLt's first 8 heuristic candidates."""
import sys, json, math
import numpy as np
sys.path.insert(0, ".")
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from nvmath.bindings import cublasLt
from workbench import library_calls as lc

stream = drv.Stream()
rng = np.random.default_rng(0)


def to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def dev(host):
    p = drv.mem_alloc(max(16, host.nbytes)); drv.memcpy_htod(p, host); return p


def timed(call, reps=20):
    for _ in range(3):
        call(stream)
    ts = []
    for _ in range(reps):
        a, b = drv.Event(), drv.Event()
        a.record(stream); call(stream); b.record(stream); b.synchronize()
        ts.append(b.time_since(a) * 1000)
    return float(np.median(ts))


def lt_calls(a, b, d, m, n, k, trans_a=False, trans_b=False, beta=0.0, epilogue="DEFAULT", pointers=(),
             bias_f32=False, aux_ld=0, want=8):
    handle = lc.cublaslt_handle()
    elem = lc.DATA_TYPES["bf16"]
    lda, ldb, ldd = lc._col_major(m, n, k, trans_a, trans_b, 0, 0, 0)
    Attr = cublasLt.MatmulDescAttribute
    desc = cublasLt.matmul_desc_create(lc._compute_type(False), lc.R_32F)
    dt = cublasLt.get_matmul_desc_attribute_dtype
    lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSA, dt, 1 if trans_b else 0)
    lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSB, dt, 1 if trans_a else 0)
    if epilogue != "DEFAULT":
        lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE, dt, int(getattr(cublasLt.Epilogue, epilogue)))
    for attr, ptr in pointers:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, getattr(Attr, attr), dt, int(ptr))
    if aux_ld:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE_AUX_LD, dt, aux_ld)
    if bias_f32:
        lc._set(cublasLt.matmul_desc_set_attribute, desc, Attr.BIAS_DATA_TYPE, dt, 0)  # CUDA_R_32F
    lay = lambda r, c_, ld: cublasLt.matrix_layout_create(elem, int(r), int(c_), int(ld))
    layout_b = lay(k, n, ldb) if trans_b else lay(n, k, ldb)
    layout_a = lay(m, k, lda) if trans_a else lay(k, m, lda)
    layout_d = lay(n, m, ldd)
    pref = cublasLt.matmul_preference_create()
    lc._set(cublasLt.matmul_preference_set_attribute, pref, cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
            cublasLt.get_matmul_preference_attribute_dtype, lc.WORKSPACE)
    results = cublasLt.MatmulHeuristicResult(want)
    count = np.zeros(1, dtype=np.int32)
    try:
        cublasLt.matmul_algo_get_heuristic(handle, desc, layout_b, layout_a, layout_d, layout_d, pref, want,
                                           results.ptr, count.ctypes.data)
    except Exception as e:  # noqa: BLE001
        return [], f"{type(e).__name__}: {e}"
    scalars = np.array([1.0, beta], dtype=np.float32)
    ws = lc._workspace()
    calls = []
    for i in range(int(count[0])):
        algo = np.array(results[i]["algo"])

        def call(s, algo=algo):
            cublasLt.matmul(handle, desc, scalars.ctypes.data, int(b), layout_b, int(a), layout_a,
                            scalars.ctypes.data + 4, int(d), layout_d, int(d), layout_d, algo.ctypes.data,
                            int(ws), lc.WORKSPACE, lc._stream_handle(s))
        call.keep = (algo, scalars, results, desc)
        calls.append(call)
    return calls, None


def gelu_grad(x):
    c = math.sqrt(2 / math.pi)
    u = c * (x + 0.044715 * x ** 3)
    th = np.tanh(u)
    return 0.5 * (1 + th) + 0.5 * x * (1 - th ** 2) * c * (1 + 3 * 0.044715 * x ** 2)


def report(row):
    print(json.dumps(row), flush=True)


def dgelu_case(N, OC=768, C=3072, check=True):
    dout = to_bf16(rng.normal(0, 0.1, (N, OC))); w = to_bf16(rng.normal(0, 0.02, (OC, C)))
    pre = to_bf16(rng.normal(0, 1, (N, C)))
    a, b, aux = dev(dout), dev(w), dev(pre)
    d = drv.mem_alloc(N * C * 2)
    bias = drv.mem_alloc(C * 4)
    ref = None
    if check:
        prod = from_bf16(dout).astype(np.float64) @ from_bf16(w).astype(np.float64)
        ref = (prod * gelu_grad(from_bf16(pre).astype(np.float64))).sum(0)
    for epi, f32 in (("DGELU", False), ("DGELU_BGRAD", False), ("DGELU_BGRAD", True)):
        ptrs = [("EPILOGUE_AUX_POINTER", aux)] + ([("BIAS_POINTER", bias)] if "BGRAD" in epi else [])
        calls, err = lt_calls(a, b, d, N, C, OC, epilogue=epi, pointers=ptrs, bias_f32=f32, aux_ld=C)
        row = {"case": "fcproj dgelu dinp", "N": N, "epilogue": epi, "bias_f32": f32, "candidates": len(calls), "error": err}
        if calls:
            ts = [timed(c) for c in calls]
            row["us"] = [round(t, 1) for t in ts]
            row["best_us"] = round(min(ts), 1)
            if check and "BGRAD" in epi:
                errs = []
                for c in calls[:4]:
                    drv.memset_d32(bias, 0x7FC00000, C)  # NaN
                    c(stream); stream.synchronize()
                    if f32:
                        got = np.empty(C, np.float32); drv.memcpy_dtoh(got, bias)
                    else:
                        raw = np.empty(C, np.uint16); drv.memcpy_dtoh(raw, bias); got = from_bf16(raw)
                    errs.append(float(np.max(np.abs(got - ref))))
                row["max_abs_err_first4"] = errs
                row["ref_abs_max"] = float(np.abs(ref).max())
                # what version 4 does: sum the bf16 dpre in fp32
                dh = np.empty(N * C, np.uint16); drv.memcpy_dtoh(dh, d)
                row["v4_style_err"] = float(np.max(np.abs(from_bf16(dh).reshape(N, C).astype(np.float64).sum(0) - ref)))
        report(row)


def dweight_case(N, OC, C=768, check=True):
    dout = to_bf16(rng.normal(0, 0.1, (N, OC))); inp = to_bf16(rng.normal(0, 1, (N, C)))
    a, b = dev(dout), dev(inp)
    d = drv.mem_alloc(OC * C * 2); drv.memset_d16(d, 0, OC * C)
    bias = drv.mem_alloc(OC * 4)
    ref = from_bf16(dout).astype(np.float64).sum(0) if check else None
    for epi, f32 in (("DEFAULT", False), ("BGRADA", False), ("BGRADA", True), ("BGRADB", False), ("BGRADB", True)):
        ptrs = [("BIAS_POINTER", bias)] if "BGRAD" in epi else []
        calls, err = lt_calls(a, b, d, OC, C, N, trans_a=True, beta=1.0, epilogue=epi, pointers=ptrs, bias_f32=f32)
        row = {"case": "dweight", "N": N, "OC": OC, "epilogue": epi, "bias_f32": f32, "candidates": len(calls), "error": err}
        if calls:
            ts = [timed(c) for c in calls]
            row["us"] = [round(t, 1) for t in ts]
            row["best_us"] = round(min(ts), 1)
            if check and "BGRAD" in epi:
                errs = []
                for c in calls[:4]:
                    drv.memset_d32(bias, 0x7FC00000, OC)
                    c(stream); stream.synchronize()
                    if f32:
                        got = np.empty(OC, np.float32); drv.memcpy_dtoh(got, bias)
                    else:
                        raw = np.empty(OC, np.uint16); drv.memcpy_dtoh(raw, bias); got = from_bf16(raw)
                    errs.append(float(np.max(np.abs(got - ref))) if got.size == OC else None)
                row["max_abs_err_first4"] = errs
                row["ref_abs_max"] = float(np.abs(ref).max())
        report(row)


for N in (8192, 32768):
    chk = N == 8192
    dgelu_case(N, check=chk)
    for OC in (768, 2304):
        dweight_case(N, OC, check=chk)
