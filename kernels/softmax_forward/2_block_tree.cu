/*
title = "A block per row, shared-memory tree reductions"
builds_on = 1
changed = "A whole block shares a row: each thread takes a strided slice, and the max and the sum are combined by halving trees in shared memory."
why = """
Consecutive threads now read consecutive addresses, so each warp's load is one coalesced
transaction, and N * block_size threads are at work instead of N. The price of the tree: log2(block)
steps, each a __syncthreads(), twice per row (max, then sum). The row is still read three times
(max, sum, write); the re-reads partly come from L2.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]  # powers of two: the tree halves the block each step

[[launch]]
kernel = "softmax_forward2"
grid = "N"
block = "block_size"
shared = "4 * block_size"
args = ["out", "inp", "N", "V"]
*/
#include <cfloat>

// Combine every thread's `v` with max (is_max) or +; every thread gets the result.
__device__ float block_tree(float v, float* partial, bool is_max) {
    int tid = threadIdx.x;
    partial[tid] = v;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            float o = partial[tid + stride];
            partial[tid] = is_max ? fmaxf(partial[tid], o) : partial[tid] + o;
        }
        __syncthreads();
    }
    float result = partial[0];
    __syncthreads();  // the slots are reused by the next reduction
    return result;
}

extern "C" __global__ void softmax_forward2(float* out, const float* inp, int N, int V) {
    extern __shared__ float partial[];
    int row = blockIdx.x;  // grid = N: every block has a row, and all its threads reach the barriers
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
    m = block_tree(m, partial, true);

    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(x[i] - m);
    s = block_tree(s, partial, false);

    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) y[i] = expf(x[i] - m) * inv;
}
