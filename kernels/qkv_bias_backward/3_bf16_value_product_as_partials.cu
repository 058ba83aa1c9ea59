/*
title = "bf16: the value product as column partials too, in the query's launch (one reduce for both thirds)"
builds_on = 2
precision = "bf16"
changed = "The value third is the column sums of proj_weight's rows scaled by dproj_bias (sum over j of dproj_bias[j] * proj_weight[j][k]): version 2's query partials, over another matrix of C rows. So the first launch gets a second set of column stripes that sum the scaled weight rows into a second set of partials, and the second launch only adds partials: a query column's into dbias, a value column's set in place."
why = """
Measured on the H100 at the B = 32 step's size (B = 32, T = 1024, C = 768; session 23, call 1):
version 2 takes 35.7 us, against 60.0 for matmul_backward_bias 8 on the whole of dqkv, where the
query third alone (50 MB) would take ~17 at the copy ceiling. Its value blocks are the cause:
each thread walks 96 weight rows, a load and a multiply-add a row, a chain of memory round trips
that no other work hides, in a launch of its own after the stream of dqkv. As partials, the
weight's rows are spread over the first launch's row groups (one or two rows a warp) and read while
dqkv streams; the second launch does 22 partial rows a thread for either third. The sums run in
another order than version 2's, the same bits every run.
"""
preconditions = ["C % 8 == 0"]
block_sizes = [128, 256, 512]

[derived]
groups = "min(max(1, SMS * 4 // cdiv(C, 256)), cdiv(N, block_size // 32), 1024)"

[scratch]
partial = "groups * 2 * C"

[[launch]]
kernel = "qkvb_partials3"
grid = ["2 * cdiv(C, 256)", "groups"]
block = "block_size"
shared = "block_size * 32"
args = ["partial", "dqkv", "dproj_bias", "proj_weight", "N", "C"]

[[launch]]
kernel = "qkvb_finish3"
grid = "2 * cdiv(C, 32)"
block = [32, 8]
shared = "8 * 32 * 4"
args = ["dbias", "partial", "groups", "C"]

[[emulate]]
sizes = [{ B = 3, T = 5, C = 8 }, { B = 2, T = 33, C = 264 }, { B = 2, T = 1000, C = 40 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3 sms=1"]
*/

#include "bf16.cuh"
#include "column_parts.cuh"  // add_warps_eight_columns, store_eight, add_eight_parts

// Block (x, y), x < cdiv(C, 256): query columns 256x .. 256x+255 of dqkv (rows 3C apart), rows
// y*warps + warp stepping by all the row groups' warps. x >= cdiv(C, 256): the same columns of
// proj_weight (C rows of C), each row scaled by its dproj_bias. Eight columns a lane, 16-byte
// loads; the block's fp32 sums go to partial[y][x * 256 ...] (query columns, then value columns).
extern "C" __global__ void qkvb_partials3(float* partial, const bf16* dqkv, const bf16* dproj_bias,
                                          const bf16* proj_weight, int N, int C) {
    extern __shared__ float lane_sums[];  // [warps][32 lanes][8 columns]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int stripes = (C + 255) / 256;
    const bool value = blockIdx.x >= stripes;
    const int col = (value ? blockIdx.x - stripes : blockIdx.x) * 256 + lane * 8;
    const int step = gridDim.y * warps;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (col < C) {  // C % 8 == 0: the lane's eight columns are all inside
        if (value) {
            for (int row = blockIdx.y * warps + warp; row < C; row += step) {
                const Pack8 w = load8(proj_weight + (size_t)row * C + col);
                const float s = to_float(dproj_bias[row]);
#pragma unroll
                for (int j = 0; j < 8; j++) acc[j] += s * to_float(w.v[j]);
            }
        } else {
            const size_t stride = 3 * (size_t)C;
#pragma unroll 4
            for (int row = blockIdx.y * warps + warp; row < N; row += step) {
                const Pack8 x = load8_stream(dqkv + row * stride + col);
#pragma unroll
                for (int j = 0; j < 8; j++) acc[j] += to_float(x.v[j]);
            }
        }
    }
    add_warps_eight_columns(acc, lane_sums);
    if (warp == 0 && col < C) store_eight(partial + (size_t)blockIdx.y * 2 * C + (value ? C : 0) + col, acc);
}

// Column k of the 2C partial columns (query k < C, value k >= C): lane threadIdx.x's column of the
// block's 32, threadIdx.y's eighth of the G partial rows, the eighths added in order. A query
// column's total is added into dbias[k]; a value column's sets dbias[C + k] (the value third).
extern "C" __global__ void qkvb_finish3(bf16* dbias, const float* partial, int G, int C) {
    extern __shared__ float parts[];  // [8][32]
    const int stripes = (C + 31) / 32;
    const bool value = blockIdx.x >= stripes;
    const int k = (value ? blockIdx.x - stripes : blockIdx.x) * 32 + threadIdx.x;
    const int column = (value ? C : 0) + k;
    float sum = 0.0f;
    if (k < C) {
        for (int g = threadIdx.y; g < G; g += 8) sum += partial[(size_t)g * 2 * C + column];
    }
    const float total = add_eight_parts(sum, parts);
    if (threadIdx.y == 0 && k < C) {
        if (value) {
            dbias[2 * C + k] = to_bf16(total);
        } else {
            dbias[k] = to_bf16(to_float(dbias[k]) + total);
        }
    }
}
