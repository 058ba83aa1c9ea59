/*
title = "A warp per row, shuffle reductions"
builds_on = 2
changed = "Each warp owns a row and reduces with __shfl_xor_sync (registers) instead of a shared-memory tree; several independent warps per block."
why = """
A warp's 32 lanes read 32 consecutive floats (coalesced), and a warp reduction needs neither
shared memory nor __syncthreads(): five register shuffles, after which every lane holds the
result. Warps of a block no longer wait for each other. The catch for long rows: each lane walks
V/32 (1,570) elements serially, three times, with only 8192 warps in the whole grid.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward3"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["out", "inp", "N", "V"]
*/
#include <cfloat>

// Written out on purpose: the shuffle reduction is this version's lesson. Later versions
// include warp_max and warp_sum from kernels/common/reduce.cuh.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

extern "C" __global__ void softmax_forward3(float* out, const float* inp, int N, int V) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: row is the same for its 32 lanes
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    float m = -FLT_MAX;
    for (int i = lane; i < V; i += 32) m = fmaxf(m, x[i]);
    m = warp_max(m);

    float s = 0.0f;
    for (int i = lane; i < V; i += 32) s += expf(x[i] - m);
    s = warp_sum(s);

    float inv = 1.0f / s;
    for (int i = lane; i < V; i += 32) y[i] = expf(x[i] - m) * inv;
}
