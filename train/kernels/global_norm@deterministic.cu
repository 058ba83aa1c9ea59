/*
title = "Deterministic: per-block partial sums to scratch, a second kernel adds them in order"
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
// ---- begin reduce.cuh ----
// reduce.cuh: warp and block reductions of floats (sum and max).
//
// Shared because the same five-shuffle butterfly and the same two-level block reduction were
// written out in more than a dozen versions across seven families. The versions whose lesson is
// the reduction itself (layernorm_forward 5, softmax_forward 3 and 4, reduce 5, and
// matmul_backward_bias 2's inline loop) still write it out; every other version includes this
// header.
//
// warp_sum<LANES>(v), warp_max<LANES>(v)
//   An xor butterfly over aligned groups of LANES lanes (LANES a power of two <= 32; the default
//   is the whole warp). Every lane of a group gets the group's result. The shuffles use the full
//   mask: all 32 lanes of the warp must make the call (a warp may only leave early as a whole).
//
// block_sum(v), block_max(v)
//   Over every thread of the block: each warp reduces with warp_sum/warp_max, one shared slot per
//   warp, then warp 0 reduces the slots. Every thread gets the result.
//   * blockDim.x must be a multiple of 32 (full warps), at most 1024; every thread must call
//     (there are __syncthreads() inside: never call under a condition that splits the block).
//   * 33 floats of static shared memory (32 warp slots and the result), one buffer for both
//     functions; no dynamic shared memory, so a launch's `shared` does not change.
//   * The barrier after the warp step also orders every thread's earlier shared-memory writes
//     before anything after the call; the last barrier frees the slots, so calls may follow
//     each other directly.

#ifndef KERNELS_COMMON_REDUCE_CUH
#define KERNELS_COMMON_REDUCE_CUH

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// The two-level block reduction behind block_sum and block_max (is_max is a constant at every
// call site, so the unused branches compile away).
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float slots[33];  // [0, 32): one per warp; [32]: the result
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? slots[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) slots[32] = w;
    }
    __syncthreads();
    float result = slots[32];
    __syncthreads();  // the slots are free for the next call
    return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, false); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, true); }

#endif  // KERNELS_COMMON_REDUCE_CUH

// ---- end reduce.cuh ----  // block_sum: shuffles in each warp, then one shared slot per warp

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
