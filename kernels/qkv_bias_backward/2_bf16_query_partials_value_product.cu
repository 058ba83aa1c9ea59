/*
title = "bf16: the query third in 128-bit loads and per-block partials, the value product beside their reduce"
builds_on = 1
precision = "bf16"
changed = "Two launches. The first is matmul_backward_bias 8's plan on the query third only: a lane loads eight bf16 columns of a row in one 16-byte access (rows 3C apart), blocks of a 256-column stripe split the rows and write fp32 partials. The second adds each query column's partials in a fixed order into dbias (rounded once), and in the same launch its other blocks compute the value third: a warp's 32 lanes take 32 neighbouring columns of proj_weight, its 8 warps split the C rows, and the block adds the eight dot products in a fixed order (kernels/common/column_parts.cuh)."
why = """
Version 1 leaves most of the GPU idle: C query threads walk the rows one by one, and the C value
threads a row of C products each. The query third is version 1's pass over N x C values, which
is what costs; eight columns a 16-byte load and a 2-D grid (column stripes x row groups, about
four blocks an SM) keep enough bytes in flight to run it at the copy rate, as in
matmul_backward_bias 8. The value product is C x C multiply-adds on a 1.2 MB weight (bf16,
C = 768): small enough to ride in the reduce launch, where its blocks run beside the query
columns' reduce instead of adding a third launch. The key third is never touched. Every sum is
taken in a fixed order, so the result is the same bits every run (--deterministic may use it).
"""
preconditions = ["C % 8 == 0"]
block_sizes = [128, 256, 512]

[derived]
groups = "min(max(1, SMS * 4 // cdiv(C, 256)), cdiv(N, block_size // 32), 1024)"

[scratch]
partial = "groups * C"

[[launch]]
kernel = "qkvb_query_partials2"
grid = ["cdiv(C, 256)", "groups"]
block = "block_size"
shared = "block_size * 32"
args = ["partial", "dqkv", "N", "C"]

[[launch]]
kernel = "qkvb_finish2"
grid = "2 * cdiv(C, 32)"
block = [32, 8]
shared = "8 * 32 * 4"
args = ["dbias", "partial", "groups", "dproj_bias", "proj_weight", "C"]

[[emulate]]
sizes = [{ B = 3, T = 5, C = 8 }, { B = 2, T = 33, C = 264 }, { B = 2, T = 1000, C = 40 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3 sms=1"]
*/

#include "bf16.cuh"
#include "column_parts.cuh"  // add_warps_eight_columns, store_eight, add_eight_parts

// Block (x, y): query columns 256x .. 256x+255 (eight a lane), rows y*warps + warp stepping by
// all the row groups' warps (a row is 3C wide, its query third its first C columns); the block's
// fp32 sums go to partial[y][...].
extern "C" __global__ void qkvb_query_partials2(float* partial, const bf16* dqkv, int N, int C) {
    extern __shared__ float lane_sums[];  // [warps][32 lanes][8 columns]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int col = blockIdx.x * 256 + lane * 8;
    const size_t stride = 3 * (size_t)C;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (col < C) {  // C % 8 == 0: the lane's eight columns are all in the query third
        const int step = gridDim.y * warps;
#pragma unroll 4
        for (int row = blockIdx.y * warps + warp; row < N; row += step) {
            const Pack8 x = load8_stream(dqkv + row * stride + col);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += to_float(x.v[j]);
        }
    }
    add_warps_eight_columns(acc, lane_sums);
    if (warp == 0 && col < C) store_eight(partial + (size_t)blockIdx.y * C + col, acc);
}

// Blocks 0 .. cdiv(C, 32) - 1: query columns, dbias[c] += the G partial rows of column c.
// The rest: value columns, dbias[2C + k] = sum over j of dproj_bias[j] * proj_weight[j][k].
// Either way lane = the column within the block's 32, threadIdx.y = which eighth of the rows
// (partials or weight rows) the thread adds; add_eight_parts adds the eighths in a fixed order.
extern "C" __global__ void qkvb_finish2(bf16* dbias, const float* partial, int G, const bf16* dproj_bias,
                                        const bf16* proj_weight, int C) {
    extern __shared__ float parts[];  // [8][32]
    const int part = threadIdx.y;
    const int stripes = (C + 31) / 32;
    const bool value = blockIdx.x >= stripes;
    const int k = (value ? blockIdx.x - stripes : blockIdx.x) * 32 + threadIdx.x;
    float sum = 0.0f;
    if (k < C) {
        if (value) {
            for (int j = part; j < C; j += 8) sum += to_float(dproj_bias[j]) * to_float(proj_weight[(size_t)j * C + k]);
        } else {
            for (int g = part; g < G; g += 8) sum += partial[(size_t)g * C + k];
        }
    }
    const float total = add_eight_parts(sum, parts);
    if (part == 0 && k < C) {
        if (value) {
            dbias[2 * C + k] = to_bf16(total);
        } else {
            dbias[k] = to_bf16(to_float(dbias[k]) + total);
        }
    }
}
