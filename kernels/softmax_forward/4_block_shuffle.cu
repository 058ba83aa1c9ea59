/*
title = "A block per row: warp shuffles, then shared memory across warps"
builds_on = 3
changed = "Back to a block per row, but each reduction is two-level: shuffles inside every warp, then one shared-memory slot per warp combined by a final shuffle."
why = """
Version 3 gives a 200 KB row to 32 lanes; a block of up to 1024 threads spreads it so each
thread has ~50 elements instead of 1,570, and many more loads are in flight per row. Against
version 2's tree, the reduction needs two __syncthreads() instead of log2(block_size) + 1, and
works for any multiple of 32 threads.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward4"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ N = 3, V = 37 }, { N = 2, V = 1025 }]
runs = ["bs=32 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]
*/
#include <cfloat>

// Written out on purpose: the two-level block reduction is this version's lesson. Later
// versions include warp_max, warp_sum, block_max and block_sum from kernels/common/reduce.cuh.
__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// Every thread of the block gets the max (is_max) or the sum of all threads' `v`.
// blockDim.x is a multiple of 32, so every warp is full and the full shuffle mask is right.
__device__ float block_reduce(float v, bool is_max) {
    __shared__ float per_warp[32];
    __shared__ float result;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) per_warp[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float w = lane < warps ? per_warp[lane] : (is_max ? -FLT_MAX : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) result = w;
    }
    __syncthreads();
    float r = result;
    __syncthreads();  // per_warp and result are reused by the next call
    return r;
}

extern "C" __global__ void softmax_forward4(float* out, const float* inp, int N, int V) {
    int row = blockIdx.x;
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
    m = block_reduce(m, true);

    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - m);
    s = block_reduce(s, false);

    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) y[i] = expf(x[i] - m) * inv;
}
