/*
title = "One fused kernel, a warp per row"
builds_on = 1
changed = "The add and the LayerNorm run in one kernel: each warp adds its row, writes residual, and normalizes the sums it just computed."
why = """
residual no longer makes a round trip: it is written once and never read back, and there is one
launch instead of two. Each warp reads inp1 and inp2 of its row once from memory; the variance
and normalize passes recompute inp1 + inp2 from the same addresses, which this warp has just
pulled into L1, rather than reading residual back (its lines were just written and may not be
in L1). Those last reads use the streaming hint, as do the stores of normed. The variance is
the exact two-pass sum of (x - mean)^2. Any C.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "fused_residual_forward2"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]
*/

#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

extern "C" __global__ void fused_residual_forward2(float* residual, float* normed, float* mean,
                                                   float* rstd, const float* inp1, const float* inp2,
                                                   const float* weight, const float* bias, int N,
                                                   int C, float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    size_t offset = (size_t)row * C;
    const float* a = inp1 + offset;
    const float* b = inp2 + offset;

    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float x = a[i] + b[i];
        residual[offset + i] = x;
        sum += x;
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = a[i] + b[i] - m;
        sq += d * d;
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = normed + offset;
    for (int i = lane; i < C; i += 32) {
        float x = __ldcs(a + i) + __ldcs(b + i);
        __stcs(o + i, (x - m) * s * weight[i] + bias[i]);
    }
}
