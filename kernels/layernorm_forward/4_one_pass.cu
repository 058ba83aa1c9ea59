/*
title = "One pass for the statistics: var = E[x^2] - E[x]^2"
builds_on = 3
changed = "The mean and the mean of squares are accumulated in the same loop, so the row is read twice instead of three times; the warp sums are kernels/common/reduce.cuh's shuffles instead of cg::reduce."
why = """
Version 3 reads the row once for the mean and again for the variance. Accumulating sum(x) and
sum(x*x) together gives both statistics in one pass: var = E[x^2] - E[x]^2. In exact arithmetic
it is the same; in float32 the subtraction loses bits when |mean| is large against the spread
(catastrophic cancellation), so it is clamped at zero. For normalized activations it is well
within tolerance, and one fewer pass over the row means fewer loads.

The warp sums are the same five xor shuffles as version 3's cg::reduce, written out once in
kernels/common/reduce.cuh (warp_sum). What changes is the compile: <cooperative_groups.h> adds
about 84,000 preprocessed lines to every compile, and on the H100 machine nvcc took 1.7-2.3 s for
this file with it and 0.5-0.6 s without. That was most of the time from a save to a new table in
`workbench run layernorm_forward 4 --watch` (1.7-2.3 s with it, 0.8-0.97 s without).
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward4"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/
#include "reduce.cuh"

extern "C" __global__ void layernorm_forward4(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    int warps_per_block = blockDim.x / 32;
    int row = blockIdx.x * warps_per_block + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: row is the same for all its lanes
    const float* x = inp + (size_t)row * C;
    int lane = threadIdx.x % 32;

    float sum = 0.0f, sumsq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float xi = x[i];
        sum += xi;
        sumsq += xi * xi;
    }
    sum = warp_sum(sum);
    sumsq = warp_sum(sumsq);
    float m = sum / C;
    float var = fmaxf(sumsq / C - m * m, 0.0f);
    float s = rsqrtf(var + eps);

    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = s * (__ldcs(x + i) - m);
        __stcs(o + i, n * weight[i] + bias[i]);
    }
}
