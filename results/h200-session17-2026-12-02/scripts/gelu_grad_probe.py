"""gelu.cuh's gelu_grad_tanh (hardware tanh) and gelu_grad (exp + reciprocal) on the GPU against
gelu' in float64, over x in [-12, 12] (and at bf16's representable values there)."""
import json, os, sys
import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv
from pycuda.compiler import SourceModule

src = r'''
#include "gelu.cuh"
extern "C" __global__ void probe(float* a, float* b, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { a[i] = gelu_grad_tanh(x[i]); b[i] = gelu_grad(x[i]); }
}'''
mod = SourceModule(src, options=["--use_fast_math"], include_dirs=[os.path.abspath("kernels/common")], no_extern_c=True)
x = np.linspace(-12, 12, 2_000_001).astype(np.float32)
bits = np.arange(0, 1 << 16, dtype=np.uint32) << 16
xb = bits.view(np.float32)
xb = xb[np.isfinite(xb) & (np.abs(xb) <= 12)]
x = np.concatenate([x, xb]).astype(np.float32)
a, b = np.empty_like(x), np.empty_like(x)
mod.get_function("probe")(drv.Out(a), drv.Out(b), drv.In(x), np.int32(x.size), block=(256, 1, 1), grid=((x.size + 255) // 256, 1))
xd = x.astype(np.float64)
S, c = np.sqrt(2 / np.pi), 0.044715
th = np.tanh(S * (xd + c * xd ** 3))
ref = 0.5 * (1 + th) + 0.5 * xd * (1 - th ** 2) * S * (1 + 3 * c * xd ** 2)
out = {}
for name, got in (("gelu_grad_tanh", a), ("gelu_grad", b)):
    err = np.abs(got - ref)
    row = {"max": float(err.max()), "at": float(x[err.argmax()])}
    for lo, hi in ((0, 1), (1, 2), (2, 3), (3, 4), (4, 6), (6, 12)):
        m = (np.abs(x) >= lo) & (np.abs(x) < hi)
        row[f"|x| {lo}-{hi}"] = float(err[m].max())
    out[name] = row
    print(name, json.dumps(row))
json.dump(out, open(sys.argv[1], "w"), indent=1)
