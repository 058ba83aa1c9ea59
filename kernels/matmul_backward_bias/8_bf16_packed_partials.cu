/*
title = "bf16: 128-bit loads of eight columns, per-block fp32 partials, then a reduce (deterministic)"
builds_on = 6
precision = "bf16"
changed = "Version 6's plan on bf16 data: each lane loads eight bf16 columns in one 16-byte access (a warp covers 256 columns of a row), keeps eight fp32 sums, and the blocks of a column stripe write fp32 partials that a second kernel adds, in a fixed order, into dbias (rounded to bf16 once)."
why = """
Version 7 reads two bytes per lane per load: a warp's 64-byte row segment is one memory
transaction's worth, but 32 separate load instructions. Eight columns per 16-byte load cut the
instructions by 8x and keep many bytes in flight; a 2-D grid (column stripes x row groups) fills
every SM even when OC is small. The partials (G x OC fp32) stay in L2, and a fixed order of adds
makes the result the same bits every run, which the trainer's --deterministic mode needs.
"""
preconditions = ["OC % 8 == 0"]
block_sizes = [128, 256, 512]

[derived]
groups = "min(max(1, SMS * 4 // cdiv(OC, 256)), cdiv(N, block_size // 32), 1024)"

[scratch]
partial = "groups * OC"

[[launch]]
kernel = "bias_bf16_partials"
grid = ["cdiv(OC, 256)", "groups"]
block = "block_size"
shared = "block_size * 32"
args = ["partial", "dout", "N", "OC"]

[[launch]]
kernel = "bias_bf16_reduce"
grid = "cdiv(OC, 32)"
block = [32, 8]
shared = "8 * 32 * 4"
args = ["dbias", "partial", "groups", "OC"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 50, OC = 264 }, { B = 1, T = 300, OC = 520 }]  # a stripe with one lane's columns
runs = ["bs=256 seed=1 SHUFFLE sms=1", "bs=512 seed=2 PRIORITY"]
*/

#include "bf16.cuh"
#include "column_parts.cuh"  // add_warps_eight_columns, store_eight, add_eight_parts

// Block (x, y): columns 256x .. 256x+255 (eight per lane), rows y*warps + warp, stepping by all
// the row groups' warps; its fp32 sums go to partial[y][...].
extern "C" __global__ void bias_bf16_partials(float* partial, const bf16* dout, int N, int OC) {
    extern __shared__ float warp_sums8[];  // [warps][32 lanes][8 columns]
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int oc = blockIdx.x * 256 + lane * 8;
    float sum[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (oc < OC) {
        const int step = gridDim.y * warps;
#pragma unroll 4
        for (int row = blockIdx.y * warps + warp; row < N; row += step) {
            Pack8 x = load8_stream(dout + (size_t)row * OC + oc);
#pragma unroll
            for (int j = 0; j < 8; j++) sum[j] += to_float(x.v[j]);
        }
    }
    add_warps_eight_columns(sum, warp_sums8);
    if (warp == 0 && oc < OC) store_eight(partial + (size_t)blockIdx.y * OC + oc, sum);
}

// dbias[oc] += the G partial rows of column oc, added in a fixed order; a block covers 32 columns.
extern "C" __global__ void bias_bf16_reduce(bf16* dbias, const float* partial, int G, int OC) {
    extern __shared__ float parts[];  // [8][32]
    const int oc = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (oc < OC) {
        for (int g = threadIdx.y; g < G; g += 8) sum += partial[(size_t)g * OC + oc];
    }
    const float total = add_eight_parts(sum, parts);
    if (threadIdx.y == 0 && oc < OC) dbias[oc] = to_bf16(to_float(dbias[oc]) + total);
}
