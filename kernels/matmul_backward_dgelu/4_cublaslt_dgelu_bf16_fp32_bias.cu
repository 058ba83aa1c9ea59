/*
title = "bf16: the DGELU epilogue alone, the bias gradient summed in fp32 by two kernels of ours"
builds_on = 3
precision = "bf16"
changed = "cuBLASLt's epilogue only applies gelu' (DGELU, no BGRAD); dpre's column sums are taken by our own kernels in fp32: row slices into fp32 partials, then the partials in slice order added into dpre_bias, rounded to bf16 once."
why = """
On the H100 version 3 failed its check at the default sizes: 16 of 3072 dpre_bias elements off by
up to 0.062 (results/h100-loop-and-fusions-2026-11-27/). Its column sums come out of the epilogue
in the output's type, bf16: a sum of 8192 values near 0.05 kept in 8 bits of mantissa loses about
an ulp of the running total (0.002 at 0.3) on every add it rounds, which adds up to the errors seen.
So the epilogue here stops at dpre = gelu'(pre) * (dout @ weight), and the bias gradient is read
back from dpre: each block of dgelu_column_partials4 takes 256 columns (eight a thread, one 16-byte
load) of one slice of the rows, its eight warps striding over the slice's rows, and leaves the
slice's sums in fp32; dgelu_bias_add4 adds the slices' sums in order (the same bits every run) into
dpre_bias. The read of dpre costs 2 * N * C bytes (50 MB at the default sizes, ~20 us at the copy
ceiling), the price of an exact sum; SLICES row slices give the partials kernel enough blocks for
every multiprocessor (12 column tiles x 16 slices at C = 3072).
"""
preconditions = ["C % 8 == 0"]

[derived]
SLICES = "min(16, N)"
ROWS = "cdiv(N, min(16, N))"

[scratch]
partial = "min(16, B * T) * C"

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
kernel = "dgelu_column_partials4"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "N", "C", "ROWS"]

[[launch]]
kernel = "dgelu_bias_add4"
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
// its eight warps taking every eighth row of the slice; the warps' sums meet in shared memory.
extern "C" __global__ void dgelu_column_partials4(float* partial, const bf16* dpre, int N, int C, int rows) {
    __shared__ float sums[8][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 256 + 8 * lane;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        for (int r = r0 + warp; r < r1; r += 8) {
            Pack8 p = load8(dpre + (size_t)r * C + c);
            for (int j = 0; j < 8; ++j) s[j] += to_float(p.v[j]);
        }
    }
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
extern "C" __global__ void dgelu_bias_add4(bf16* dpre_bias, const float* partial, int C, int slices) {
    add_slice_sums(dpre_bias, partial, C, slices);
}
