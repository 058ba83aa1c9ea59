"""Which of cuBLASLt's algorithms for the bf16 step's GEMM shapes put a memset in front of their
kernel (seen as graph nodes when one call is captured), at the trainer's 32 MiB workspace and at
none, and each captured call's time (median of 30 graph replays, random bf16 operands, B=16)."""
import sys, json
import numpy as np
sys.path.insert(0, ".")
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from cuda.bindings import driver as cu
from nvmath.bindings import cublasLt, cublas
from workbench import library_calls as lc

N, C, V = 16384, 768, 50304
stream = drv.Stream()
bufs = {}
def buf(name, elems):
    if name not in bufs:
        import cupy as cp
        bufs[name] = drv.mem_alloc(elems * 2)
        x = ((cp.random.standard_normal(elems, dtype=cp.float32) * 0.05).view(cp.uint32) >> 16).astype(cp.uint16)
        drv.memcpy_dtod(bufs[name], x.data.ptr, elems * 2)
        del x
    return int(bufs[name])

KIND = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty"}
def captured(call):
    s = cu.CUstream(stream.handle)
    assert cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)[0] == 0
    call(stream)
    err, g = cu.cuStreamEndCapture(s)
    err, nodes, n = cu.cuGraphGetNodes(g, 0)
    err, nodes, n = cu.cuGraphGetNodes(g, n)
    kinds = [KIND.get(int(cu.cuGraphNodeGetType(x)[1]), "?") for x in nodes]
    err, ex = cu.cuGraphInstantiate(g, 0)
    for _ in range(3):
        cu.cuGraphLaunch(ex, s)
    ts = []
    for _ in range(30):
        a, b = drv.Event(), drv.Event()
        a.record(stream); cu.cuGraphLaunch(ex, s); b.record(stream); b.synchronize()
        ts.append(b.time_since(a) * 1000)
    return kinds, float(np.median(ts))

def lt_candidates(a, b, d, m, n, k, ws, trans_a=False, trans_b=False, beta=0.0, bias=0, gelu=False, aux=0, dgelu=False, want=8):
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
            cublasLt.get_matmul_preference_attribute_dtype, ws)
    results = cublasLt.MatmulHeuristicResult(want)
    count = np.zeros(1, dtype=np.int32)
    cublasLt.matmul_algo_get_heuristic(handle, desc, layout_b, layout_a, layout_d, layout_d, pref, want, results.ptr, count.ctypes.data)
    scalars = np.array([1.0, beta], dtype=np.float32)
    wsp = lc._workspace()
    calls = []
    for i in range(int(count[0])):
        algo = np.array(results[i]["algo"])
        def call(s, algo=algo):
            cublasLt.matmul(handle, desc, scalars.ctypes.data, int(b), layout_b, int(a), layout_a,
                            scalars.ctypes.data + 4, int(d), layout_d, int(d), layout_d, algo.ctypes.data,
                            int(wsp), ws, lc._stream_handle(s))
        call.keep = (algo, scalars, results, desc, pref)
        calls.append(call)
    return calls

def case(label, m, n, k, kind, **kw):
    a, b, d = buf(f"a{label}", m * k), buf(f"b{label}", k * n), buf(f"d{label}", m * n)
    if kw.get("bias"): kw["bias"] = buf(f"bias{label}", n)
    if kw.get("aux"): kw["aux"] = buf(f"aux{label}", m * n)
    out = {"gemm": label}
    if kind == "gemm":
        now = lc.gemm(a, b, d, m, n, k, trans_a=kw.get("trans_a", False), beta=kw.get("beta", 0.0), dtype="bf16")
        out["trainer_call"] = captured(now)
        h = lc.cublas_handle()
        cublas.set_workspace(h, int(lc._workspace()), 0)
        out["cublas_no_workspace"] = captured(now)
        cublas.set_workspace(h, int(lc._workspace()), lc.WORKSPACE)
    else:
        out["trainer_call"] = captured(lc.gemm_lt(a, b, d, m, n, k, dtype="bf16", **kw))
    for ws in (lc.WORKSPACE, 0):
        out[f"lt_ws{ws >> 20}MiB"] = [captured(c) for c in lt_candidates(a, b, d, m, n, k, ws, **kw)]
    print(json.dumps(out), flush=True)

case("qkv fwd", N, 3 * C, C, "lt", trans_b=True, bias=1)
case("attproj fwd", N, C, C, "lt", trans_b=True, bias=1)
case("fc fwd gelu aux", N, 4 * C, C, "lt", trans_b=True, bias=1, gelu=True, aux=1)
case("fcproj dgelu dinp", N, 4 * C, C, "lt", dgelu=True, aux=1)
case("qkv dinp", N, C, 3 * C, "gemm")
case("fc dweight", 4 * C, C, N, "gemm", trans_a=True, beta=1.0)
case("attproj dweight", C, C, N, "gemm", trans_a=True, beta=1.0)
