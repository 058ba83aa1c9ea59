/*
title = "bf16 storage: one fused kernel, a warp per row, the fp32 sum normalized"
builds_on = 2
precision = "bf16"
changed = "Version 2 with bf16 inputs and outputs: inp1 and inp2 are widened to float and added in float; residual stores that sum rounded to bf16 once; mean, rstd and normed are computed from the float sum (not from the rounded residual); normed is rounded once as it is stored."
why = """
The step from fp32 to bf16 storage: the op is memory-bound and every byte that must move (two
rows in, two rows out) halves, so the time should nearly halve. Which value gets normalized
matters now: residual holds inp1 + inp2 rounded to 8 significant bits, and normalizing those
rounded values would give a mean and rstd that differ from those of the exact sum by the
roundings' average (up to 0.4% of a value at C = 1, up to 3e-4 at C = 768), beyond what the
backward's fp32 mean and rstd are checked to. So each pass recomputes the float sum from inp1
and inp2 (this warp has just pulled them into L1) and normalizes it, as version 2 does; residual
is only written. Every output is one rounding of a float result, at most half a bf16 ulp (0.4%).
Any C. Still version 2's scalar accesses (64 bytes per warp load) and three passes through L1:
the next version loads eight values per 16-byte access and keeps the row in registers.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "fused_residual_forward4"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]
*/

#include "bf16.cuh"    // bf16, to_float/to_bf16
#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

extern "C" __global__ void fused_residual_forward4(bf16* residual, bf16* normed, float* mean,
                                                   float* rstd, const bf16* inp1, const bf16* inp2,
                                                   const bf16* weight, const bf16* bias, int N,
                                                   int C, float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    size_t offset = (size_t)row * C;
    const bf16* a = inp1 + offset;
    const bf16* b = inp2 + offset;

    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float x = to_float(a[i]) + to_float(b[i]);
        __stcs(residual + offset + i, to_bf16(x));
        sum += x;
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_float(a[i]) + to_float(b[i]) - m;
        sq += d * d;
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);
    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
    bf16* o = normed + offset;
    for (int i = lane; i < C; i += 32) {
        float x = to_float(__ldcs(a + i)) + to_float(__ldcs(b + i));
        __stcs(o + i, to_bf16((x - m) * s * to_float(weight[i]) + to_float(bias[i])));
    }
}
