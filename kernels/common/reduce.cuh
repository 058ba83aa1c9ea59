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
