/*
title = "bf16: a plain tuned GEMM, then gelu' applied in place in the pass that takes the column sums"
builds_on = 6
precision = "bf16"
changed = "The input gradient's GEMM has no epilogue: cuBLASLt writes dout @ weight (rounded to bf16) into dpre, its algorithm chosen by timing as in version 6. One kernel then reads that and pre, writes dpre = gelu'(pre) * it in place and sums the dpre it wrote into version 5's column partials; version 5's slice add and version 6's weight gradient follow unchanged."
why = """
In the B = 16 step on an H200 (results/h200-session13-2026-12-01/call4) the DGELU GEMM is one
of cuBLASLt's older sm90_xmma kernels (128x128 tiles, no overlapped epilogue): 159 us a layer
for 77 GFLOP, ~490 TFLOP/s, where plain GEMMs of the same size run nvjet kernels at 740 or more.
Without the epilogue the GEMM can take those. The price is bytes: the GEMM writes 2 bytes an
element, and the column-sum pass, which read dpre (2 bytes), now reads the GEMM's output and pre
and writes dpre (6 bytes): 300 MB a layer at B = 16 instead of 100, ~50 us more at the copy's
speed, against the ~55 us the GEMM should gain. This version measures whether that trade wins.
Numerically it is the unfused trainer's order (matmul_backward rounds dout @ weight to bf16, then
gelu_backward rounds the product): two roundings of dpre where version 6 has one.
"""
preconditions = ["C % 8 == 0"]

[derived]
SLICES = "max(1, min(cdiv(N, 32), SMS * 4 // cdiv(C, 256)))"  # four blocks of 256 columns per SM, >= 32 rows each
ROWS = "cdiv(N, SLICES)"

[scratch]
partial = "SLICES * C"

[[launch]]
library = "gemm_lt"
a = "dout"
b = "weight"
d = "dpre"
m = "N"
n = "C"
k = "OC"
dtype = "bf16"
tune = 8

[[launch]]
kernel = "dgelu_in_place_partials7"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "pre", "N", "C", "ROWS"]

[[launch]]
kernel = "dgelu_bias_add5"
grid = "cdiv(C, 256)"
block = 256
args = ["dpre_bias", "partial", "C", "SLICES"]

[[launch]]
library = "gemm_lt"
a = "dout"
b = "inp"
d = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
dtype = "bf16"
tune = 8
*/
// The slice add (dgelu_bias_add5): version 5's kernel, included from its file.
#include "5_cublaslt_dgelu_bf16_column_sums_at_copy_speed.cu"
#include "gelu.cuh"  // gelu_grad

// One row's eight columns: dpre (holding dout @ weight) becomes gelu'(pre) * dpre, rounded to
// bf16 and stored back; the rounded values are what the column sums add (the bias gradient of the
// dpre every later call reads).
__device__ __forceinline__ void dgelu_pack7(float (&s)[8], bf16* at, const Pack8& g, const Pack8& p) {
    Pack8 d;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        d.v[j] = to_bf16(gelu_grad(to_float(p.v[j])) * to_float(g.v[j]));
        s[j] += to_float(d.v[j]);
    }
    store8(at, d);
}

// partial[s * C + c] = the sum over the rows of slice s of the new dpre[row, c], in fp32, as
// dgelu_column_partials5 takes it (the same grid, the same row order within a warp), with each
// row's dpre made first: a block holds 256 columns (eight a thread, C % 8 == 0), its eight warps
// take every eighth row of the slice, and a warp loads four rows of both inputs before it works on
// any. Each element is read and written by the one thread that owns it, so in place is safe.
extern "C" __global__ void dgelu_in_place_partials7(float* partial, bf16* dpre, const bf16* pre, int N, int C,
                                                    int rows) {
    __shared__ float sums[8][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 256 + 8 * lane;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        int r = r0 + warp;
        for (; r + 24 < r1; r += 32) {
            Pack8 g[4], p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const size_t at = (size_t)(r + 8 * u) * C + c;
                g[u] = load8(dpre + at);
                p[u] = load8(pre + at);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) dgelu_pack7(s, dpre + (size_t)(r + 8 * u) * C + c, g[u], p[u]);
        }
        for (; r < r1; r += 8) {
            const size_t at = (size_t)r * C + c;
            dgelu_pack7(s, dpre + at, load8(dpre + at), load8(pre + at));
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sums[warp][lane][j] = s[j];
    __syncthreads();
    if (warp == 0 && c < C) {
        for (int j = 0; j < 8; ++j) {
            float t = sums[0][lane][j];
            for (int w = 1; w < 8; ++w) t += sums[w][lane][j];
            partial[(size_t)blockIdx.y * C + c + j] = t;
        }
    }
}
