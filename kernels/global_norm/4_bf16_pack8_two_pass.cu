/*
title = "bf16 gradients: eight per 16-byte load, fp32 sums, version 3's deterministic two passes"
builds_on = 3
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
#include "bf16.cuh"    // bf16, Pack8, load8_stream, to_float
#include "reduce.cuh"  // block_sum: shuffles in each warp, then one shared slot per warp

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
