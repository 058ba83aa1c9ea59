/*
title = "Deterministic: per-block partial sums to scratch, a second kernel adds them in order"
builds_on = 2
changed = "Version 2's first pass writes each block's sum to its own slot in scratch instead of an atomic; a one-block second kernel adds the slots in a fixed order and writes norm2 (no memset needed)."
why = """
Reproducible training needs norm2 to have the same bits on every run: the clip factor feeds
every parameter. With no float atomics, every sum here has a fixed shape (each thread's stride,
each block's shuffle tree, the second kernel's strided sums and tree), so the result depends
only on N and the block size. It costs a second launch over ~1000 floats, a few microseconds at
most, against ~200 us of streaming, and it saves the memset that the atomic versions need.
"""
block_sizes = [64, 128, 256, 512, 1024]

[derived]
blocks = "min(cdiv(N, 4 * block_size), SMS * 2048 // block_size)"  # one wave of resident blocks, fewer when N is small

[scratch]
partial = "blocks"

[[launch]]
kernel = "global_norm3_partials"
grid = "blocks"
block = "block_size"
args = ["partial", "grads", "N"]

[[launch]]
kernel = "global_norm3_finish"
grid = "1"
block = "block_size"
args = ["norm2", "partial", "blocks"]
*/

#include "reduce.cuh"  // block_sum: shuffles in each warp, then one shared slot per warp

__device__ __forceinline__ float sq4(float4 a) { return (a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w); }

__device__ float thread_sum_of_squares(const float* grads, int N) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int n4 = ((size_t)grads & 15) == 0 ? N / 4 : 0;
    const float4* g4 = reinterpret_cast<const float4*>(grads);
    int i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        s0 += sq4(__ldcs(g4 + i));
        s1 += sq4(__ldcs(g4 + i + stride));
        s2 += sq4(__ldcs(g4 + i + 2 * stride));
        s3 += sq4(__ldcs(g4 + i + 3 * stride));
    }
    for (; i < n4; i += stride) s0 += sq4(__ldcs(g4 + i));
    for (int j = 4 * n4 + tid; j < N; j += stride) {
        float g = grads[j];
        s1 += g * g;
    }
    return (s0 + s1) + (s2 + s3);
}

extern "C" __global__ void global_norm3_partials(float* partial, const float* grads, int N) {
    float total = block_sum(thread_sum_of_squares(grads, N));
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

extern "C" __global__ void global_norm3_finish(float* norm2, const float* partial, int P) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) norm2[0] = s;
}
