/*
title = "bf16: a plain tuned bias GEMM writes pre, then one pass applies the GELU"
builds_on = 5
precision = "bf16"
changed = "The GEMM's epilogue adds only the bias (cuBLASLt's BIAS, algorithm chosen by timing as in version 5) and writes pre; a second kernel reads pre and writes out = gelu(pre), eight values a 16-byte access. out is now the GELU of pre as rounded to bf16, not of the fp32 pre."
why = """
Version 5's GELU_AUX_BIAS GEMM is one of the B = 16 step's slowest for its FLOPs on an H200: 155
us a layer for 77 GFLOP (~500 TFLOP/s, results/h200-session13-2026-12-01/call4), where plain
GEMMs of the same size run at 740 or more. The epilogue writes two matrices and cuBLASLt's GELU
tiles do not hide it. A bias-only epilogue is cheap, so the GEMM should run near the plain speed
(~105 us); the GELU pass then reads pre and writes out, 200 MB at B = 16, ~48 us at the copy's
speed. That is about even: this version measures which side of even it lands on.
"""
preconditions = ["OC % 8 == 0"]

[[launch]]
library = "gemm_lt"
a = "inp"
b = "weight"
d = "pre"
m = "N"
n = "OC"
k = "C"
trans_b = true
bias = "bias"
dtype = "bf16"
workspace = 0
tune = 8

[[launch]]
kernel = "gelu_packs6"
grid = "cdiv(N * OC, 8 * 2 * 256)"
block = 256
args = ["out", "pre", "N * OC"]
*/
#include "bf16.cuh"  // bf16, Pack8, load8, store8, to_float/to_bf16
#include "gelu.cuh"  // gelu

// out = gelu(pre) over n elements, n % 8 == 0 (OC % 8 == 0) and both 16-byte aligned: each thread
// takes two packs of eight, a block's threads the consecutive packs of each of its two strides, both
// loads issued before either is used.
extern "C" __global__ void gelu_packs6(bf16* out, const bf16* pre, long long n) {
    const long long packs = n / 8;
    const long long base = (long long)blockIdx.x * 2 * blockDim.x + threadIdx.x;
    Pack8 x[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i < packs) x[u] = load8(pre + 8 * i);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const long long i = base + (long long)u * blockDim.x;
        if (i >= packs) continue;
        Pack8 y;
#pragma unroll
        for (int j = 0; j < 8; ++j) y.v[j] = to_bf16(gelu(to_float(x[u].v[j])));
        store8(out + 8 * i, y);
    }
}
