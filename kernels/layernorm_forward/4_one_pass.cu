/*
title = "One pass for the statistics: var = E[x^2] - E[x]^2"
builds_on = 3
changed = "The mean and the mean of squares are accumulated in the same loop, so the row is read twice instead of three times."
why = """
Version 3 reads the row once for the mean and again for the variance. Accumulating sum(x) and
sum(x*x) together gives both statistics in one pass: var = E[x^2] - E[x]^2. In exact arithmetic
it is the same; in float32 the subtraction loses bits when |mean| is large against the spread
(catastrophic cancellation), so it is clamped at zero. For normalized activations it is well
within tolerance, and one fewer pass over the row means fewer loads.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward4"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void layernorm_forward4(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;
    int lane = warp.thread_rank();

    float sum = 0.0f, sumsq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float xi = x[i];
        sum += xi;
        sumsq += xi * xi;
    }
    sum = cg::reduce(warp, sum, cg::plus<float>());
    sumsq = cg::reduce(warp, sumsq, cg::plus<float>());
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
