/*
title = "bf16 gradients: eight per 16-byte load, fp32 sums, version 3's deterministic two passes"
precision = "bf16"
changed = "Version 3 reading bf16 gradients: each grid-stride step loads a Pack8 (eight gradients in 16 bytes) instead of a float4, widens them to fp32 and adds their squares to fp32 accumulators; four packs in flight per thread. The per-block partials and the one-block finish are version 3's, so the result is still reproducible."
why = """
The reduction reads N values and nothing else, so its time is the bytes: 2 a gradient instead
of 4, half of version 3's. Everything that made version 3 fast stays: one wave of resident
blocks walking the array with grid strides, four independent 16-byte loads in flight per thread
(now 32 gradients), the squares summed in registers (four accumulators), one shuffle tree per
block and no atomics. The precision costs nothing: a bf16 value's square is exact in fp32 (8
significant bits squared fit in 24), the sums are fp32 as before, and norm2 stays fp32; the
squares' arithmetic, 8 FMAs a load, still hides under the memory traffic.
"""
block_sizes = [64, 128, 256, 512, 1024]

[derived]
# one wave of resident blocks, fewer when N is small
blocks = "min(cdiv(N, 8 * block_size), SMS * 2048 // block_size)"

[scratch]
partial = "blocks"

[[launch]]
kernel = "global_norm4_partials"
grid = "blocks"
block = "block_size"
args = ["partial", "grads", "N"]

[[launch]]
kernel = "global_norm4_finish"
grid = "1"
block = "block_size"
args = ["norm2", "partial", "blocks"]
*/

#include <stdint.h>
// ---- begin bf16.cuh ----
// bf16.cuh: bfloat16 storage for the bf16 versions: the type, 128-bit packs of eight, and
// conversions, so every bf16 kernel moves memory the same way.
//
// Shared because each bf16 version of a memory-bound family reads and writes 16 bytes per thread
// per access (eight bf16 values), converts to float for its arithmetic and back to bf16 to store.
//
// bf16 (= __nv_bfloat16): 1 sign, 8 exponent, 7 mantissa bits; float's range, ~3 significant
//   digits. Arithmetic is done in float; only storage is bf16.
// Pack8: eight bf16 in 16 bytes, aligned to 16. load8/store8 are plain 128-bit accesses;
//   load8_stream/store8_stream use the streaming cache hints (__ldcs/__stcs: data touched once,
//   evict first) for inputs and outputs no later kernel of the same launch reads again.
//   The pointer must be 16-byte aligned: an index that is a multiple of 8 elements from a
//   cudaMalloc'd base.
// to_float / to_bf16: the conversions, round to nearest even.

#ifndef KERNELS_COMMON_BF16_CUH
#define KERNELS_COMMON_BF16_CUH

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

struct alignas(16) Pack8 {
    bf16 v[8];
};

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ Pack8 load8(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
    return out;
}

__device__ __forceinline__ void store8(bf16* p, const Pack8& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

__device__ __forceinline__ Pack8 load8_stream(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
    return out;
}

__device__ __forceinline__ void store8_stream(bf16* p, const Pack8& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

#endif  // KERNELS_COMMON_BF16_CUH

// ---- end bf16.cuh ----    // bf16, Pack8, load8_stream, to_float
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

// s + the squares of a pack's eight values, in fp32 (fmaf: one rounding per square and add).
__device__ __forceinline__ float add_squares(float s, const Pack8& x) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float g = to_float(x.v[j]);
        s = fmaf(g, g, s);
    }
    return s;
}

__device__ float thread_sum_of_squares(const bf16* grads, int N) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int n8 = ((uintptr_t)grads & 15) == 0 ? N / 8 : 0;  // whole packs (none if unaligned)
    int i = tid;
    for (; i + 3 * stride < n8; i += 4 * stride) {  // four independent loads in flight
        Pack8 a = load8_stream(grads + (size_t)i * 8);
        Pack8 b = load8_stream(grads + (size_t)(i + stride) * 8);
        Pack8 c = load8_stream(grads + (size_t)(i + 2 * stride) * 8);
        Pack8 d = load8_stream(grads + (size_t)(i + 3 * stride) * 8);
        s0 = add_squares(s0, a);
        s1 = add_squares(s1, b);
        s2 = add_squares(s2, c);
        s3 = add_squares(s3, d);
    }
    for (; i < n8; i += stride) s0 = add_squares(s0, load8_stream(grads + (size_t)i * 8));
    for (int j = 8 * n8 + tid; j < N; j += stride) {  // the tail (or everything, if unaligned)
        float g = to_float(grads[j]);
        s1 = fmaf(g, g, s1);
    }
    return (s0 + s1) + (s2 + s3);
}

extern "C" __global__ void global_norm4_partials(float* partial, const bf16* grads, int N) {
    float total = block_sum(thread_sum_of_squares(grads, N));
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

extern "C" __global__ void global_norm4_finish(float* norm2, const float* partial, int P) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < P; i += blockDim.x) s += partial[i];
    s = block_sum(s);
    if (threadIdx.x == 0) norm2[0] = s;
}
