/*
title = "bf16: version 4 with dpre's column sums read at the copy's speed (more slices, four rows in flight)"
builds_on = 4
precision = "bf16"
changed = "dgelu_column_partials gets four blocks of 256 columns per SM (SLICES = SMS * 4 / column tiles, at least 32 rows a slice) where version 4 had 16 slices, and each warp issues the loads of four rows before it adds them (in the same row order as version 4)."
why = """
In the trainer's bf16 step on the H100 (GPT-2 124M, B=16, results/h100-session10-2026-11-28/call1)
version 4's column sums took 48.6 us a call for 100 MB of dpre: 2.07 TB/s, 69% of the copy
ceiling, 0.58 ms of the 29.7 ms step (1.08 ms at B=32). Its grid at C = 3072 is 12 column tiles x
16 slices = 192 blocks, 1.5 a multiprocessor, each warp with one 16-byte load in flight: too few
bytes on the way to cover the memory's latency. Four blocks per SM with four loads each in flight
keep ~64 KB a multiprocessor in flight. The partials grow to SLICES x C floats (44 slices at C = 3072 on 132
SMs: 0.5 MB), which stay in L2 for the add; the sums keep version 4's order within a warp.
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
dgelu = true
aux = "pre"
dtype = "bf16"

[[launch]]
kernel = "dgelu_column_partials5"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "N", "C", "ROWS"]

[[launch]]
kernel = "dgelu_bias_add5"
grid = "cdiv(C, 256)"
block = 256
args = ["dpre_bias", "partial", "C", "SLICES"]

[[launch]]
library = "gemm"
a = "dout"
b = "inp"
c = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
dtype = "bf16"
*/
#include "bf16.cuh"  // bf16, Pack8, load8, to_float/to_bf16
#include "slice_sums.cuh"  // add_slice_sums

// partial[s * C + c] = the sum over the rows of slice s (rows s*rows .. s*rows + rows - 1) of
// dpre[row, c], in fp32. A block: 256 columns, eight a thread (C % 8 == 0: whole 16-byte packs),
// its eight warps taking every eighth row of the slice, four such rows loaded before any is added;
// the warps' sums meet in shared memory.
extern "C" __global__ void dgelu_column_partials5(float* partial, const bf16* dpre, int N, int C, int rows) {
    __shared__ float sums[8][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 256 + 8 * lane;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        const bf16* col = dpre + c;
        int r = r0 + warp;
        for (; r + 24 < r1; r += 32) {
            Pack8 p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] = load8(col + (size_t)(r + 8 * u) * C);
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int j = 0; j < 8; ++j) s[j] += to_float(p[u].v[j]);
        }
        for (; r < r1; r += 8) {
            Pack8 p = load8(col + (size_t)r * C);
#pragma unroll
            for (int j = 0; j < 8; ++j) s[j] += to_float(p.v[j]);
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

// dpre_bias[c] += the slices' sums, added in slice order (the same bits every run), rounded once.
extern "C" __global__ void dgelu_bias_add5(bf16* dpre_bias, const float* partial, int C, int slices) {
    add_slice_sums(dpre_bias, partial, C, slices);
}
