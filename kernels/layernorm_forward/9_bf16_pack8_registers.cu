/*
title = "bf16, 16-byte loads of eight values, the row held in registers as float"
builds_on = 8
precision = "bf16"
changed = "Version 8 with version 6's layout: each lane loads its share of the row as Pack8 (eight bf16 in 16 bytes) once, up front, and keeps it widened to float in registers; mean and variance come from registers; weight and bias are staged in shared memory as Pack8, once per block, while the rows' loads are in flight."
why = """
Version 8 reads the row three times with 2-byte loads: a warp's load instruction moves 64 bytes.
Here a warp's load moves 512 bytes (32 lanes x 16), an eighth of the instructions, and each lane
issues all of its C/256 loads before it waits for any, so a row of 768 is three 16-byte loads in
flight per lane. The row then crosses the memory bus once in and once out, the minimum: half of
version 6's bytes for the same structure. The two-pass variance is exact and costs no memory.
weight and bias are read by every row: each block copies them into shared memory once (Pack8,
4*C bytes; 32 lanes reading 32 consecutive packs is conflict-free), and each warp issues its
row's loads before that copy and its barrier, so their latencies overlap instead of adding up.
Registers hold the row widened to float (8 per pack), so the array needs a compile-time size:
one instantiation for rows up to 1024 (4 packs per lane, GPT-2's 768) and one up to 2048 (8
packs, GPT-2 XL's 1600); the launch picks one. Packs past the row are zeros and are never
stored.
"""
# Pack8 rows need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); the registers hold at most 2048 values per row.
preconditions = ["C % 8 == 0", "C <= 2048"]
block_sizes = [32, 64, 128, 256, 512]

[[launch]]
kernel = "layernorm_forward9_c1024"
when = "C <= 1024"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "layernorm_forward9_c2048"
when = "C > 1024"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=512 seed=1 SHUFFLE order=3"]
*/

#include "layernorm_bf16.cuh"  // Pack8 loads, unpack8, warp_row_stats, normalize8, stage_weight_bias

// VEC: packs per lane, so rows up to 256 * VEC values fit in registers.
template <int VEC>
__device__ void layernorm_rows_bf16(bf16* out, float* mean, float* rstd, const bf16* inp,
                                    const bf16* weight, const bf16* bias, int N, int C, float eps) {
    extern __shared__ Pack8 wb[];  // C/8 packs of weight, then C/8 of bias
    int C8 = C / 8;
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    bool live = row < N;  // the same for the whole warp
    const bf16* x = inp + (size_t)row * C;

    const Pack8 zero = {};
    Pack8 p[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {  // every load of the row is issued first, in flight while
        int i = k * 32 + lane;       // the block stages the weights and waits at the barrier
        p[k] = live && i < C8 ? load8_stream(x + 8 * i) : zero;
    }
    stage_weight_bias(wb, weight, bias, C8);
    if (!live) return;  // after the barrier: every thread helped stage the weights

    float v[VEC][8];
#pragma unroll
    for (int k = 0; k < VEC; k++) unpack8(p[k], v[k]);
    float2 stats = warp_row_stats<VEC>(v, C8, C, eps);
    if (lane == 0) {
        __stcs(mean + row, stats.x);
        __stcs(rstd + row, stats.y);
    }
    bf16* o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        if (i < C8) store8_stream(o + 8 * i, normalize8(v[k], stats.x, stats.y, wb[i], wb[C8 + i]));
    }
}

extern "C" __global__ void layernorm_forward9_c1024(bf16* out, float* mean, float* rstd,
                                                    const bf16* inp, const bf16* weight,
                                                    const bf16* bias, int N, int C, float eps) {
    layernorm_rows_bf16<4>(out, mean, rstd, inp, weight, bias, N, C, eps);
}

extern "C" __global__ void layernorm_forward9_c2048(bf16* out, float* mean, float* rstd,
                                                    const bf16* inp, const bf16* weight,
                                                    const bf16* bias, int N, int C, float eps) {
    layernorm_rows_bf16<8>(out, mean, rstd, inp, weight, bias, N, C, eps);
}
