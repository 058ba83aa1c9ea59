/*
title = "bf16 storage: a warp per row, widened to float, rounded once"
builds_on = 3
precision = "bf16"
changed = "Version 3's warp per row with bf16 in and out (weight and bias too): every value is widened to float as it is loaded, the sums, the variance and the normalization are all float, and each output is rounded to bf16 once, as it is stored. mean and rstd stay float."
why = """
The step from fp32 to bf16 storage. LayerNorm is memory-bound, and the bytes that must move are
almost all the row in and the row out: at 2 bytes a value instead of 4 they halve, and so should
the time. Only storage changes: widening a bf16 to float is exact (it is the top half of a
float), the arithmetic is the fp32 versions' (a warp's sum over C values in bf16 would lose the
mean after a few hundred terms: 8 significant bits), and rounding once at the store keeps the
error at half a bf16 ulp, 0.4%. mean and rstd stay float: the backward needs them more exactly
than bf16 holds them. Any C. What is still slow is version 3's: scalar accesses (a warp's load
now moves only 64 bytes) and three passes over the row (the later two from L1); the next
version loads eight values per 16-byte access and keeps the row in registers.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward8"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/

#include "bf16.cuh"    // bf16, to_float/to_bf16
#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

extern "C" __global__ void layernorm_forward8(bf16* out, float* mean, float* rstd, const bf16* inp,
                                              const bf16* weight, const bf16* bias, int N, int C,
                                              float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: row is the same for all its lanes
    const bf16* x = inp + (size_t)row * C;

    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += to_float(x[i]);
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = to_float(x[i]) - m;
        sq += d * d;
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);
    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
    bf16* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = (to_float(__ldcs(x + i)) - m) * s;
        __stcs(o + i, to_bf16(n * to_float(weight[i]) + to_float(bias[i])));
    }
}
