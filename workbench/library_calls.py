"""Library calls a version's launch steps may name: cuBLAS and cuBLASLt through nvmath-python.

Everything here works on raw device pointers in the primary context PyCUDA uses, and is enqueued
on the caller's stream, so library steps sit in a plan (and in a CUDA graph) like kernels do.

All matrices are described row-major, the way the kernels see them:
    D[batch] = alpha * op(A[batch]) @ op(B[batch]) + beta * C        (m x n) = (m x k)(k x n)
with op(X) = X.T when trans_x. cuBLAS is column-major, so each call computes the transpose
D^T = op(B)^T op(A)^T, which is the same memory.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

# cudaDataType values of the element types a call may name (dtype="f32" | "bf16").
DATA_TYPES = {"f32": 0, "bf16": 14}  # CUDA_R_32F, CUDA_R_16BF
R_32F = DATA_TYPES["f32"]
WORKSPACE = 32 * 1024 * 1024

_LIBRARY: dict[str, Callable[..., Callable[[Any], None]]] = {}


def library(fn):
    _LIBRARY[fn.__name__] = fn
    return fn


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


@library
def gemm(a, b, c, m, n, k, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, batch=1,
         stride_a=0, stride_b=0, stride_c=0, lda=0, ldb=0, ldc=0, tf32=False):
    """cuBLAS (strided-batched) GEMM, row-major: C = alpha op(A) op(B) + beta C."""
    from nvmath.bindings import cublas
    handle = cublas_handle()
    lda, ldb, ldc = _col_major(m, n, k, trans_a, trans_b, lda, ldb, ldc)
    op_a = int(cublas.Operation.T if trans_a else cublas.Operation.N)
    op_b = int(cublas.Operation.T if trans_b else cublas.Operation.N)
    scalars = np.array([alpha, beta], dtype=np.float32)
    compute = _compute_type(bool(tf32))
    algo = int(cublas.GemmAlgo.DEFAULT)

    def call(stream):
        cublas.set_stream(handle, _stream_handle(stream))
        cublas.gemm_strided_batched_ex(
            handle, op_b, op_a, int(n), int(m), int(k), scalars.ctypes.data,
            int(b), R_32F, ldb, int(stride_b), int(a), R_32F, lda, int(stride_a),
            scalars.ctypes.data + 4, int(c), R_32F, ldc, int(stride_c), int(batch), compute, algo)
    call.keep = scalars  # type: ignore[attr-defined]  # alpha/beta must outlive the call
    return call


def _set(setter, obj, attr, dtype_fn, value):
    arr = np.array(value, dtype=dtype_fn(attr))
    setter(obj, attr, arr.ctypes.data, arr.itemsize)


@library
def gemm_lt(a, b, d, m, n, k, bias=0, c=0, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
            batch=1, stride_a=0, stride_b=0, stride_d=0, lda=0, ldb=0, ldd=0, tf32=False, gelu=False,
            dtype="f32"):
    """cuBLASLt GEMM with the bias (and optionally GELU) fused as an epilogue:
    D = act(alpha op(A) op(B) + beta C + bias), bias broadcast along D's rows (length n).
    dtype "bf16": A, B, C, D and the bias in bf16, accumulated in fp32."""
    from nvmath.bindings import cublasLt
    handle = cublaslt_handle()
    elem = DATA_TYPES[dtype]
    lda, ldb, ldd = _col_major(m, n, k, trans_a, trans_b, lda, ldb, ldd)
    Attr = cublasLt.MatmulDescAttribute
    desc = cublasLt.matmul_desc_create(_compute_type(bool(tf32) and dtype == "f32"), R_32F)
    dt = cublasLt.get_matmul_desc_attribute_dtype
    # Column-major view: D^T (n x m) = op(B)^T (n x k) @ op(A)^T (k x m)
    _set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSA, dt, 1 if trans_b else 0)
    _set(cublasLt.matmul_desc_set_attribute, desc, Attr.TRANSB, dt, 1 if trans_a else 0)
    if bias:
        epi = cublasLt.Epilogue.GELU_BIAS if gelu else cublasLt.Epilogue.BIAS
        _set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE, dt, int(epi))
        _set(cublasLt.matmul_desc_set_attribute, desc, Attr.BIAS_POINTER, dt, int(bias))
    elif gelu:
        _set(cublasLt.matmul_desc_set_attribute, desc, Attr.EPILOGUE, dt, int(cublasLt.Epilogue.GELU))

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
    pref = cublasLt.matmul_preference_create()
    _set(cublasLt.matmul_preference_set_attribute, pref, cublasLt.MatmulPreferenceAttribute.MAX_WORKSPACE_BYTES,
         cublasLt.get_matmul_preference_attribute_dtype, WORKSPACE)
    results = cublasLt.MatmulHeuristicResult(1)
    count = np.zeros(1, dtype=np.int32)
    cublasLt.matmul_algo_get_heuristic(handle, desc, layout_b, layout_a, layout_d, layout_d, pref, 1,
                                 results.ptr, count.ctypes.data)
    if count[0] == 0:
        from .errors import ContractError
        raise ContractError(f"cuBLASLt found no algorithm for m={m} n={n} k={k}")
    algo = np.array(results[0]["algo"])
    scalars = np.array([alpha, beta], dtype=np.float32)
    ws = _workspace()
    c_ptr = int(c) if c else int(d)

    def call(stream):
        cublasLt.matmul(handle, desc, scalars.ctypes.data, int(b), layout_b, int(a), layout_a,
                  scalars.ctypes.data + 4, c_ptr, layout_d, int(d), layout_d, algo.ctypes.data,
                  int(ws), WORKSPACE, _stream_handle(stream))
    call.keep = (scalars, algo, results)  # type: ignore[attr-defined]
    return call
