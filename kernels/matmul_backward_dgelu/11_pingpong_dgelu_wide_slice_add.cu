/*
title = "bf16: version 10 with the slices' column sums added by 8 warps a 32-column stripe (a 96-block grid, not 12)"
builds_on = 10
precision = "bf16"
changed = """
Only the launch after the GEMM changes. Version 10 adds the partials (one row of C fp32 sums a
128-row block of the GEMM) with version 5's slice add: one thread a column, each walking all
SLICES rows. Here a (32, 8) block takes 32 columns, each of its eight warps every eighth row of
partials, and the eight parts meet in a fixed order (kernels/common/column_parts.cuh): the same
bits every run, in another order than version 10's.
"""
why = """
At B = 32 the partials are 256 rows of 3072 columns (3.1 MB), and version 5's add runs 12 blocks
of 256 threads: a dozen SMs, each thread 256 dependent-address loads in a row. In the B = 32
step's profile (results/h100-session22-2026-12-06/call4) that kernel takes 12 us a layer for
3.1 MB, ~0.26 TB/s. With 8 warps a stripe, 96 blocks reach most SMs and each thread has 32 loads:
the read should take a few microseconds, ~0.1 ms a step over 12 layers.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma and setmaxnreg: a Hopper

[derived]
SLICES = "cdiv(N, 128)"  # a row of partials a 128-row block

[scratch]
partial = "SLICES * C"
weight_t = { size = "C * OC", dtype = "bf16" }

[[launch]]
kernel = "transpose_weight8"
grid = ["cdiv(C, 32)", "cdiv(OC, 32)"]
block = [32, 8]
args = ["weight_t", "weight", "OC", "C"]

[[launch]]
kernel = "matmul_backward_dgelu10"
grid = "min(cdiv(N, 128) * cdiv(C, 128), SMS)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2 + 2 * 4 * 128 * 4"
args = ["tma:dout, N, OC, 128, 64", "tma:weight_t, C, OC, 128, 64", "tma:dpre, N, C, 128, 64", "tma:pre, N, C, 128, 64",
        "partial", "N", "C", "OC"]

[[launch]]
kernel = "dgelu_bias_add11"
grid = "cdiv(C, 32)"
block = [32, 8]
shared = "8 * 32 * 4"
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
// The transpose and the GEMM with its dgelu epilogue: version 10's kernels.
#include "10_pingpong_dgelu_batched_loads.cu"
#include "column_parts.cuh"  // add_eight_parts

// dpre_bias[c] += the slices' sums of column c: lane threadIdx.x's column, threadIdx.y's eighth
// of the slices, the eighths added in order; rounded to bf16 once.
extern "C" __global__ void dgelu_bias_add11(bf16* dpre_bias, const float* partial, int C, int slices) {
    extern __shared__ float parts[];  // [8][32]
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < C) {
        for (int k = threadIdx.y; k < slices; k += 8) sum += partial[(size_t)k * C + c];
    }
    const float total = add_eight_parts(sum, parts);
    if (threadIdx.y == 0 && c < C) dpre_bias[c] = to_bf16(to_float(dpre_bias[c]) + total);
}
