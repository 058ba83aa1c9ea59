/*
title = "Grid-stride float4 loads, warp-shuffle block reduce, one atomic per resident block"
builds_on = 1
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "A fixed grid (one wave of resident blocks) streams through the gradients with 128-bit loads, four independent accumulators per thread; warps reduce with shuffles, warps' sums meet in shared memory, and each block issues one atomicAdd."
why = """
Version 1 spends a thread, a tree and an atomic on every block_size gradients. Here each thread
accumulates hundreds of squares in registers first (float4 loads, four loads in flight per
iteration to keep enough bytes moving), so the reduction and the atomic happen once per block
of a single wave: ~1000 atomics instead of ~490k, and no shared-memory tree. Shuffles exchange
registers within a warp without shared memory or __syncthreads(). The result still depends on
the order of the ~1000 atomics: not bit-reproducible.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
memset = "norm2"

[[launch]]
kernel = "global_norm2"
# One wave of resident blocks (SMS multiprocessors x 2048 threads); fewer when N is small.
grid = "min(cdiv(N, 4 * block_size), SMS * 2048 // block_size)"
block = "block_size"
args = ["norm2", "grads", "N"]
*/

#include "reduce.cuh"  // block_sum: shuffles in each warp, then one shared slot per warp

__device__ __forceinline__ float sq4(float4 a) { return (a.x * a.x + a.y * a.y) + (a.z * a.z + a.w * a.w); }

// This thread's sum of squares over a grid-stride walk: float4 when aligned, scalars otherwise.
__device__ float thread_sum_of_squares(const float* grads, int N) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int n4 = ((size_t)grads & 15) == 0 ? N / 4 : 0;
    const float4* g4 = reinterpret_cast<const float4*>(grads);
    int i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {  // four independent loads in flight
        s0 += sq4(__ldcs(g4 + i));
        s1 += sq4(__ldcs(g4 + i + stride));
        s2 += sq4(__ldcs(g4 + i + 2 * stride));
        s3 += sq4(__ldcs(g4 + i + 3 * stride));
    }
    for (; i < n4; i += stride) s0 += sq4(__ldcs(g4 + i));
    for (int j = 4 * n4 + tid; j < N; j += stride) {  // the tail (or everything, if unaligned)
        float g = grads[j];
        s1 += g * g;
    }
    return (s0 + s1) + (s2 + s3);
}

extern "C" __global__ void global_norm2(float* norm2, const float* grads, int N) {
    float total = block_sum(thread_sum_of_squares(grads, N));
    if (threadIdx.x == 0) atomicAdd(norm2, total);
}
