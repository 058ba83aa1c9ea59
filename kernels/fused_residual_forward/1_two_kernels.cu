/*
title = "Two kernels: the residual add, then a warp-per-row LayerNorm"
changed = "The starting point: the two ops run back to back, as an unfused model would run them."
why = """
An elementwise kernel writes residual; a LayerNorm kernel (a warp per row, shuffle reductions,
exact two-pass variance) reads it back three times: for the mean, the variance and the output.
residual makes a round trip through memory (written, then read again by a second launch), and
the second launch waits for the first to finish completely. This is the baseline the fused
versions remove.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "residual_add"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["residual", "inp1", "inp2", "N * C"]

[[launch]]
kernel = "layernorm_rows"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["normed", "mean", "rstd", "residual", "weight", "bias", "N", "C", "eps"]
*/

#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

extern "C" __global__ void residual_add(float* residual, const float* inp1, const float* inp2, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) residual[i] = inp1[i] + inp2[i];
}

extern "C" __global__ void layernorm_rows(float* normed, float* mean, float* rstd, const float* x_all,
                                          const float* weight, const float* bias, int N, int C,
                                          float eps) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    const float* x = x_all + (size_t)row * C;

    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        sq += d * d;
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = normed + (size_t)row * C;
    for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * s * weight[i] + bias[i];
}
