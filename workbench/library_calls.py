"""Library calls a version's launch steps may name: cuBLAS and cuBLASLt through nvmath-python,
and cuDNN's attention through the cuDNN frontend.

Everything here works on raw device pointers in the primary context PyCUDA uses, and is enqueued
on the caller's stream, so library steps sit in a plan (and in a CUDA graph) like kernels do.

All matrices are described row-major, the way the kernels see them:
    D[batch] = alpha * op(A[batch]) @ op(B[batch]) + beta * C        (m x n) = (m x k)(k x n)
with op(X) = X.T when trans_x. cuBLAS is column-major, so each call computes the transpose
D^T = op(B)^T op(A)^T, which is the same memory.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np

# cudaDataType values of the element types a call may name (dtype="f32" | "bf16").
DATA_TYPES = {"f32": 0, "bf16": 14}  # CUDA_R_32F, CUDA_R_16BF
R_32F = DATA_TYPES["f32"]
WORKSPACE = 32 * 1024 * 1024
# Parameters a header gives as plain words, not expressions: dtype = "bf16".
LITERAL_PARAMS = {"dtype"}

_LIBRARY: dict[str, Callable[..., Callable[[Any], None]]] = {}
# The Python modules each op imports, and the handle it creates: what a child started ahead
# loads while it waits for its job (warm), where the job's version calls the library. Importing
# nvmath's bindings took ~1 s in a fresh child; cuDNN's handle loads its libraries.
_NEEDS: dict[str, tuple[str, Callable[[], Any]]] = {}


def library(module: str, handle: Callable[[], Any]):
    def register(fn):
        _LIBRARY[fn.__name__] = fn
        _NEEDS[fn.__name__] = (module, handle)
        return fn
    return register


def warm(ops) -> None:
    """Import what the named ops use and create their handles (in the current CUDA context)."""
    import importlib
    for op in sorted(set(ops)):
        module, handle = _NEEDS[op]
        importlib.import_module(module)
        handle()


def get(name: str):
    from .errors import ContractError
    if name not in _LIBRARY:
        raise ContractError(f"unknown library op {name!r} (known: {', '.join(sorted(_LIBRARY))})")
    return _LIBRARY[name]


def names() -> list[str]:
    return sorted(_LIBRARY)


@lru_cache(maxsize=None)
def _workspace():
    import pycuda.driver as drv
    return drv.mem_alloc(WORKSPACE)


# Streams given a cuBLASLt workspace of their own (own_workspace): a gemm_lt call enqueued on one of
# them uses it, so gemm_lt calls running at once on two streams never share a workspace. Any other
# stream's calls use _workspace(). The ops in STREAM_SAFE share nothing else between streams (a
# cuDNN graph's workspace and the cuBLAS handle's are one per process), so only they may run on a
# second stream beside the first (the trainer's side stream, train/streams.py).
_STREAM_WORKSPACES: dict[int, Any] = {}
STREAM_SAFE = frozenset({"gemm_lt"})


def own_workspace(stream) -> None:
    """Give `stream` a cuBLASLt workspace of its own (WORKSPACE bytes), once."""
    import pycuda.driver as drv
    handle = _stream_handle(stream)
    if handle not in _STREAM_WORKSPACES:
        _STREAM_WORKSPACES[handle] = drv.mem_alloc(WORKSPACE)


def _workspace_for(stream):
    own = _STREAM_WORKSPACES.get(_stream_handle(stream))
    return _workspace() if own is None else own


@lru_cache(maxsize=None)
def cublas_handle() -> int:
    from nvmath.bindings import cublas
    handle = cublas.create()
    # A workspace of our own keeps cuBLAS from allocating during CUDA-graph capture.
    cublas.set_workspace(handle, int(_workspace()), WORKSPACE)
    return handle


@lru_cache(maxsize=None)
def cublaslt_handle() -> int:
    from nvmath.bindings import cublasLt
    return cublasLt.create()


def _stream_handle(stream) -> int:
    return 0 if stream is None else int(stream.handle)


def _compute_type(tf32: bool) -> int:
    from nvmath.bindings import cublas
    return int(cublas.ComputeType.COMPUTE_32F_FAST_TF32 if tf32 else cublas.ComputeType.COMPUTE_32F)


def _col_major(m, n, k, trans_a, trans_b, lda, ldb, ldc):
    """Leading dimensions of the row-major operands, defaulting to packed storage."""
    lda = lda or (m if trans_a else k)
    ldb = ldb or (k if trans_b else n)
    ldc = ldc or n
    return int(lda), int(ldb), int(ldc)


@library("nvmath.bindings.cublas", lambda: cublas_handle())
def gemm(a, b, c, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, batch=1,
         stride_a=0, stride_b=0, stride_c=0, lda=0, ldb=0, ldc=0, tf32=False, dtype="f32"):
    """cuBLAS (strided-batched) GEMM, row-major: C = alpha op(A) op(B) + beta C; dtype "bf16":
    A, B and C in bf16, accumulated in fp32."""
    from nvmath.bindings import cublas
    handle = cublas_handle()
    lda, ldb, ldc = _col_major(m, n, k, trans_a, trans_b, lda, ldb, ldc)
    op_a = int(cublas.Operation.T if trans_a else cublas.Operation.N)
    op_b = int(cublas.Operation.T if trans_b else cublas.Operation.N)
    scalars = np.array([alpha, beta], dtype=np.float32)
    compute = _compute_type(bool(tf32) and dtype == "f32")
    algo = int(cublas.GemmAlgo.DEFAULT)
    elem = DATA_TYPES[dtype]

    def call(stream):
        cublas.set_stream(handle, _stream_handle(stream))
        cublas.gemm_strided_batched_ex(
            handle, op_b, op_a, int(n), int(m), int(k), scalars.ctypes.data,
            int(b), elem, ldb, int(stride_b), int(a), elem, lda, int(stride_a),
            scalars.ctypes.data + 4, int(c), elem, ldc, int(stride_c), int(batch), compute, algo)
    call.keep = scalars  # type: ignore[attr-defined]  # alpha/beta must outlive the call
    return call


def _set(setter, obj, attr, dtype_fn, value):
    arr = np.array(value, dtype=dtype_fn(attr))
    setter(obj, attr, arr.ctypes.data, arr.itemsize)


def _epilogue(bias, gelu, aux, dgelu, bias_grad) -> tuple[str, list[tuple[str, int]]]:
    """cuBLASLt's epilogue for a gemm_lt call's options, and the pointers it takes (by attribute).

    Forward: BIAS adds the bias; GELU(_BIAS) applies GPT-2's tanh-approximation GELU (cuBLAS's
    documented one) after it; with `aux`, GELU_AUX(_BIAS) also writes the GELU's input there.
    Backward: DGELU multiplies the product by gelu'(aux) element by element; with `bias_grad`,
    DGELU_BGRAD also writes the column sums of that result (over D's rows, as D is row-major here)
    to bias_grad, overwriting it."""
    from .errors import ContractError
    if dgelu:
        if not aux or bias or gelu:
            raise ContractError("gemm_lt: dgelu needs aux (the GELU's input) and takes no bias or gelu")
        return ("DGELU_BGRAD" if bias_grad else "DGELU"), [("EPILOGUE_AUX_POINTER", aux)] + \
            ([("BIAS_POINTER", bias_grad)] if bias_grad else [])
    if bias_grad:
        raise ContractError("gemm_lt: bias_grad is the bias gradient of the dgelu epilogue: it needs dgelu = true")
    if aux and not gelu:
        raise ContractError("gemm_lt: aux holds the GELU's input: it needs gelu = true or dgelu = true")
    name = ("GELU_AUX" if aux else "GELU") if gelu else ""
    name = f"{name}_BIAS" if (name and bias) else (name or ("BIAS" if bias else "DEFAULT"))
    return name, ([("BIAS_POINTER", bias)] if bias else []) + ([("EPILOGUE_AUX_POINTER", aux)] if aux else [])


@library("nvmath.bindings.cublasLt", lambda: cublaslt_handle())
def gemm_lt(a, b, d, m, n, k, bias=0, c=0, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
            batch=1, stride_a=0, stride_b=0, stride_d=0, lda=0, ldb=0, ldd=0, tf32=False, gelu=False,
            aux=0, aux_ld=0, dgelu=False, bias_grad=0, dtype="f32", workspace=WORKSPACE, tune=0):
    """cuBLASLt GEMM with an epilogue fused (see _epilogue):
    D = act(alpha op(A) op(B) + beta C + bias), bias broadcast along D's rows (length n);
    gelu with aux: aux = the GELU's input, D = its GELU; dgelu: D = gelu'(aux) * (alpha op(A) op(B)),
    and with bias_grad: bias_grad[j] = sum over D's m rows of D[i, j] (written, not accumulated).
    aux is an m x n row-major matrix like D with rows aux_ld apart (default n; cuBLASLt wants a
    multiple of 8), in D's element type. dtype "bf16": A, B, C, D, aux, the bias and its gradient
    in bf16, accumulated in fp32. workspace: the bytes cuBLASLt may use (at most WORKSPACE); with
    a workspace its persistent kernels zero a counter in it with a memset before each launch (a
    graph node, and ~2 us a call in the trainer's step on an H200); with none (0) they run
    without one, and algorithms that split K over a workspace are not chosen. tune: 0 or 1 runs
    the heuristic's first pick; n > 1 times its first n candidates at this call's shape on random
    scratch operands and runs the fastest, remembered per device (gemm_tuning.py)."""
    from nvmath.bindings import cublasLt
    from .errors import ContractError
    handle = cublaslt_handle()
    elem = DATA_TYPES[dtype]
    workspace = int(workspace)
    if not 0 <= workspace <= WORKSPACE:
        raise ContractError(f"gemm_lt: workspace is {workspace} bytes; it may be 0 to {WORKSPACE}")
    lda, ldb, ldd = _col_major(m, n, k, trans_a, trans_b, lda, ldb, ldd)
    Attr = cublasLt.MatmulDescAttribute
    desc = cublasLt.matmul_desc_create(_compute_type(bool(tf32) and dtype == "f32"), R_32F)
    dt = cublasLt.get_matmul_desc_attribute_dtype
    # Column-major view: D^T (n x m) = op(B)^T (n x k) @ op(A)^T (k x m)
    _set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSA, dt, 1 if trans_b else 0)
    _set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSB, dt, 1 if trans_a else 0)
    epilogue, pointers = _epilogue(bias, gelu, aux, dgelu, bias_grad)
    if epilogue != "DEFAULT":
        _set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE, dt, int(getattr(cublasLt.Epilogue, epilogue)))
    def point(pairs):
        for attr, ptr in pairs:
            _set(cublasLt.matmul_desc_set_attribute, desc, getattr(Attr, attr), dt, int(ptr))
    point(pointers)
    if aux:
        # In cuBLAS's column-major view aux is n x m like D^T: its leading dimension is our row stride.
        aux_ld = int(aux_ld or n)
        if aux_ld % 8 or aux_ld < n:
            raise ContractError(f"gemm_lt: the GELU aux matrix needs rows a multiple of 8 elements apart and at "
                                f"least n = {n}; got {aux_ld}")
        _set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE_AUX_LD, dt, aux_ld)

    def layout(rows, cols, ld, stride):
        lay = cublasLt.matrix_layout_create(elem, int(rows), int(cols), int(ld))
        if batch > 1:
            L = cublasLt.MatrixLayoutAttribute
            _set(cublasLt.matrix_layout_set_attribute, lay, L.BATCH_COUNT, cublasLt.get_matrix_layout_attribute_dtype, int(batch))
            _set(cublasLt.matrix_layout_set_attribute, lay, L.STRIDED_BATCH_OFFSET,
                 cublasLt.get_matrix_layout_attribute_dtype, int(stride))
        return lay
    layout_b = layout(k, n, ldb, stride_b) if trans_b else layout(n, k, ldb, stride_b)
    layout_a = layout(m, k, lda, stride_a) if trans_a else layout(k, m, lda, stride_a)
    layout_d = layout(n, m, ldd, stride_d)
    tune = int(tune)
    results, count = _candidates(handle, desc, (layout_b, layout_a, layout_d), workspace, tune)
    if count[0] == 0:
        raise ContractError(f"cuBLASLt found no algorithm for m={m} n={n} k={k} ({dtype}, epilogue {epilogue})")
    scalars = np.array([alpha, beta], dtype=np.float32)
    ws = _workspace()  # for the tuning's trials; a call uses its stream's (_workspace_for)
    chosen = 0
    if count[0] > 1:
        chosen = _tuned_index(
            dict(handle=handle, desc=desc, layouts=(layout_b, layout_a, layout_d), scalars=scalars, ws=ws,
                 workspace=workspace, algos=[np.array(results[i]["algo"]) for i in range(int(count[0]))]),
            dict(m=m, n=n, k=k, trans_a=trans_a, trans_b=trans_b, lda=lda, ldb=ldb, ldd=ldd, aux_ld=aux_ld,
                 batch=batch, strides=(stride_a, stride_b, stride_d), beta=beta, c=c, tf32=tf32, dtype=dtype,
                 epilogue=epilogue, tune=tune, bias=bias or bias_grad, aux=aux),
            point, pointers)
    algo = np.array(results[chosen]["algo"])
    c_ptr = int(c) if c else int(d)

    def call(stream):
        cublasLt.matmul(handle, desc, scalars.ctypes.data, int(b), layout_b, int(a), layout_a,
                  scalars.ctypes.data + 4, c_ptr, layout_d, int(d), layout_d, algo.ctypes.data,
                  int(_workspace_for(stream)), workspace, _stream_handle(stream))
    call.keep = (scalars, algo, results)  # type: ignore[attr-defined]
    return call


def _candidates(handle, desc, layouts, workspace: int, tune: int):
    """cuBLASLt's heuristic's candidates for a described matmul within `workspace` bytes: its first
    pick alone, or up to `tune` of them; (results, count)."""
    from nvmath.bindings import cublasLt
    from .errors import ContractError
    if tune < 0:
        raise ContractError(f"gemm_lt: tune is {tune}; it is the number of candidates to time (0 or 1: none)")
    pref = cublasLt.matmul_preference_create()
    _set(cublasLt.matmul_preference_set_attribute, pref, cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
         cublasLt.get_matmul_preference_attribute_dtype, workspace)
    want = max(1, tune)
    results = cublasLt.MatmulHeuristicResult(want)
    count = np.zeros(1, dtype=np.int32)
    layout_b, layout_a, layout_d = layouts
    cublasLt.matmul_algo_get_heuristic(handle, desc, layout_b, layout_a, layout_d, layout_d, pref, want,
                                       results.ptr, count.ctypes.data)
    return results, count


def _tuned_index(lt: dict, call: dict, point, pointers) -> int:
    """gemm_lt's tune: which of the heuristic's candidates (lt["algos"]) runs fastest at this call
    (gemm_tuning.pick), timed on scratch operands of the call's extents; the descriptor's
    epilogue pointers go to the scratch while timing and back to the call's (`pointers`) after."""
    from nvmath.bindings import cublasLt

    from . import gemm_tuning
    c = call
    item = 2 if c["dtype"] == "bf16" else 4
    batch, (stride_a, stride_b, stride_d) = c["batch"], c["strides"]
    rows_a, rows_b = (c["k"] if c["trans_a"] else c["m"]), (c["n"] if c["trans_b"] else c["k"])
    extents = {"a": ((batch - 1) * stride_a + rows_a * c["lda"]) * item,
               "b": ((batch - 1) * stride_b + rows_b * c["ldb"]) * item,
               "d": ((batch - 1) * stride_d + c["m"] * c["ldd"]) * item}
    if c["c"] and c["beta"]:
        extents["c"] = extents["d"]
    extra = {"BIAS_POINTER": c["n"] * item} if c["bias"] else {}
    if c["aux"]:
        extra["EPILOGUE_AUX_POINTER"] = batch * c["m"] * c["aux_ld"] * item
    extents.update(extra)
    layout_b, layout_a, layout_d = lt["layouts"]
    scalars = lt["scalars"]

    def trial(i, p, stream):
        point([(attr, p[attr]) for attr in extra])  # the epilogue's pointers on the scratch too
        cublasLt.matmul(lt["handle"], lt["desc"], scalars.ctypes.data, p["b"], layout_b, p["a"], layout_a,
                        scalars.ctypes.data + 4, p.get("c", p["d"]), layout_d, p["d"], layout_d,
                        lt["algos"][i].ctypes.data, int(lt["ws"]), lt["workspace"], _stream_handle(stream))
    key = (f"{c['dtype']} tf32={int(bool(c['tf32']))} m={c['m']} n={c['n']} k={c['k']} ta={int(bool(c['trans_a']))} "
           f"tb={int(bool(c['trans_b']))} {c['epilogue']} beta={float(c['beta']) != 0} c={bool(c['c'])} batch={batch} "
           f"strides={stride_a},{stride_b},{stride_d} ld={c['lda']},{c['ldb']},{c['ldd']},{c['aux_ld']} "
           f"ws={lt['workspace']} tune={c['tune']}")
    try:
        return gemm_tuning.pick(key, len(lt["algos"]), extents, item, trial)
    finally:
        point(pointers)  # back on the call's own buffers


# -- cuDNN: scaled dot-product attention through the cuDNN frontend, on raw pointers ---------------
@lru_cache(maxsize=None)
def cudnn_handle():
    import cudnn
    return cudnn.create_handle()


def _sdpa_layout(B, T, NH, HS):
    """Strides (elements) of q/k/v inside a packed qkv (B, T, 3, NH, HS), of out (B, T, NH, HS),
    and of the log-sum-exp (B, NH, T), each seen as cuDNN's [B, H, S, D]."""
    C = NH * HS
    return [T * 3 * C, HS, 3 * C, 1], [T * C, HS, C, 1], [NH * T, T, 1, 1]


def _cudnn_plan(graph) -> Any:
    import cudnn
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    import pycuda.driver as drv
    return drv.mem_alloc(max(16, graph.get_workspace_size()))


def _bf16_graph():
    import cudnn
    return cudnn.pygraph(handle=cudnn_handle(), io_data_type=cudnn.data_type.BFLOAT16,
                         intermediate_data_type=cudnn.data_type.FLOAT, compute_data_type=cudnn.data_type.FLOAT)


@library("cudnn", lambda: cudnn_handle())
def sdpa_cudnn(q, k, v, out, lse, B, T, NH, HS, scale=0.0):
    """Causal attention forward by cuDNN (FlashAttention-2 style, bf16 in and out, fp32 softmax):
    q, k, v point into a packed bf16 qkv (B, T, 3, NH, HS); out is bf16 (B, T, NH*HS); lse, fp32
    (B, NH, T), is the natural-log log-sum-exp of each row's scaled scores (the backward's input).
    scale 0 means 1/sqrt(HS)."""
    B, T, NH, HS = int(B), int(T), int(NH), int(HS)
    return _cudnn_call(_sdpa_forward_graph(B, T, NH, HS, float(scale) or 1.0 / math.sqrt(HS)), (q, k, v, out, lse))


# A cuDNN graph is built once per shape in a process (~0.14 s each on the H100: a version checked at
# 21 cases has 7 shapes), then executed on whatever pointers a call brings. Calls on one stream may
# share its workspace: they run one after another.
def _cudnn_call(built, pointers):
    """A launch step running a graph built for its shape, (graph, its tensors, workspace), on
    `pointers`, one per tensor in order."""
    g, tensors, workspace = built
    handle = cudnn_handle()
    pack = dict(zip(tensors, (int(p) for p in pointers)))

    def call(stream):
        import cudnn
        cudnn.set_stream(handle=handle, stream=_stream_handle(stream))
        g.execute(pack, int(workspace), handle=handle)
    call.keep = (g, workspace)  # type: ignore[attr-defined]
    return call


@lru_cache(maxsize=None)
def _sdpa_forward_graph(B, T, NH, HS, scale):
    import cudnn
    qkv_stride, out_stride, lse_stride = _sdpa_layout(B, T, NH, HS)
    g = _bf16_graph()
    bf16 = cudnn.data_type.BFLOAT16
    tq, tk, tv = (g.tensor(name=n, dim=[B, NH, T, HS], stride=qkv_stride, data_type=bf16) for n in ("q", "k", "v"))
    to, tstats = g.sdpa(name="sdpa", q=tq, k=tk, v=tv, generate_stats=True, attn_scale=scale,
                        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
    to.set_output(True).set_dim([B, NH, T, HS]).set_stride(out_stride).set_data_type(bf16)
    tstats.set_output(True).set_dim([B, NH, T, 1]).set_stride(lse_stride).set_data_type(cudnn.data_type.FLOAT)
    return g, (tq, tk, tv, to, tstats), _cudnn_plan(g)


@library("cudnn", lambda: cudnn_handle())
def sdpa_backward_cudnn(q, k, v, out, dout, lse, dq, dk, dv, B, T, NH, HS, scale=0.0, deterministic=0):
    """Causal attention backward by cuDNN: dq, dk, dv (into a packed bf16 dqkv, like q, k, v) from
    dout and the forward's out and lse (see sdpa_cudnn)."""
    B, T, NH, HS = int(B), int(T), int(NH), int(HS)
    built = _sdpa_backward_graph(B, T, NH, HS, float(scale) or 1.0 / math.sqrt(HS), bool(deterministic))
    return _cudnn_call(built, (q, k, v, out, dout, lse, dq, dk, dv))


@lru_cache(maxsize=None)
def _sdpa_backward_graph(B, T, NH, HS, scale, deterministic):
    import cudnn
    qkv_stride, out_stride, lse_stride = _sdpa_layout(B, T, NH, HS)
    g = _bf16_graph()
    bf16 = cudnn.data_type.BFLOAT16
    tq, tk, tv = (g.tensor(name=n, dim=[B, NH, T, HS], stride=qkv_stride, data_type=bf16) for n in ("q", "k", "v"))
    to = g.tensor(name="o", dim=[B, NH, T, HS], stride=out_stride, data_type=bf16)
    tdo = g.tensor(name="dO", dim=[B, NH, T, HS], stride=out_stride, data_type=bf16)
    tstats = g.tensor(name="stats", dim=[B, NH, T, 1], stride=lse_stride, data_type=cudnn.data_type.FLOAT)
    tdq, tdk, tdv = g.sdpa_backward(name="sdpa_backward", q=tq, k=tk, v=tv, o=to, dO=tdo, stats=tstats,
                                    attn_scale=scale, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                    diagonal_band_right_bound=0, use_deterministic_algorithm=deterministic)
    for t in (tdq, tdk, tdv):
        t.set_output(True).set_dim([B, NH, T, HS]).set_stride(qkv_stride).set_data_type(bf16)
    return g, (tq, tk, tv, to, tdo, tstats, tdq, tdk, tdv), _cudnn_plan(g)
