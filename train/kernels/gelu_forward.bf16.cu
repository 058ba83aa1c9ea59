/*
title = "bf16 storage: eight values per 16-byte access, GELU in fp32"
precision = "bf16"
changed = "Version 3 at bf16: inp and out hold bf16, so each 16-byte access carries eight values (a Pack8) instead of four; every value is widened to fp32, goes through the same GELU, and is rounded once to bf16 on the way out. Four packs per thread, all loaded before the first GELU; the tail (N % 8) and unaligned buffers take a scalar path."
why = """
The op is memory-bound, so halving the bytes per element halves the time: 4 bytes per element
instead of 8. Nothing else has to change to get there. The access pattern is version 3's: four
independent 16-byte loads in flight per thread (now 32 values), each step u of a block reading
consecutive packs (thread t reads pack base + u*block_size + t), so every access is coalesced.
The arithmetic stays in fp32 (bf16 has only 8 significant bits): the only new error is the one
rounding of out to bf16, 2^-8 relative at most. Per byte there is now twice the arithmetic
(about 15 instructions a value: the cubic, one fast exp, one division), still about half of what
the SMs can issue in the time the bytes take, so it stays hidden under the traffic.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "gelu_forward4"
grid = "cdiv(N, 32 * block_size)"  # UNROLL packs of 8 per thread
block = "block_size"
args = ["out", "inp", "N"]
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

// ---- end bf16.cuh ----  // bf16, Pack8, load8_stream/store8_stream, to_float/to_bf16
// ---- begin gelu.cuh ----
// gelu.cuh: the tanh-approximation GELU and its derivative, for gelu_forward and gelu_backward.
//
// Shared because every version of both families carried the same constants and formulas; what
// the versions change is how elements reach them (packing, unrolling), not the math.
//
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//   Written as x / (1 + exp(-2u)), since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): under
//   --use_fast_math tanhf is the hardware tanh.approx.f32 (relative error about 2^-11, far outside
//   the 1e-5 tolerance), while the fast exp is good to a few ulp, and the logistic form has no
//   cancellation for negative x. The exponent is clamped at 80, so exp never overflows.
// gelu_grad(x) = d gelu / dx
//   With s = 1 / (1 + e), e = exp(-2u): 1 - tanh^2(u) = 4 s (1 - s) and 1 - s = e s, so
//   gelu'(x) = s + 2 x s (e s) u'. 1 - tanh^2 computed directly would cancel catastrophically
//   in the tails; e * s does not, and the clamp keeps e finite so e * s is never inf * 0.

#ifndef KERNELS_COMMON_GELU_CUH
#define KERNELS_COMMON_GELU_CUH

constexpr float GELU_SCALE = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float GELU_CUBIC = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + __expf(fminf(-2.0f * u, 80.0f)));
}

__device__ __forceinline__ float gelu_grad(float x) {
    float x2 = x * x;
    float u = GELU_SCALE * (x + GELU_CUBIC * x2 * x);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x2);
    float e = __expf(fminf(-2.0f * u, 80.0f));
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * s * (e * s) * du;
}

#endif  // KERNELS_COMMON_GELU_CUH

// ---- end gelu.cuh ----  // gelu(x), as in version 1

#define UNROLL 4

__device__ __forceinline__ bf16 gelu_bf16(bf16 x) { return to_bf16(gelu(to_float(x))); }

extern "C" __global__ void gelu_forward4(bf16* out, const bf16* inp, int N) {
    long long first = (long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;  // Pack8 index
    long long full = N / 8;  // packs of eight that lie entirely inside the array
    bool aligned = (((uintptr_t)out | (uintptr_t)inp) & 15) == 0;
    if (!aligned) {
        for (int u = 0; u < UNROLL; u++) {
            long long base = (first + (long long)u * blockDim.x) * 8;
            for (long long i = base; i < base + 8 && i < N; i++) out[i] = gelu_bf16(inp[i]);
        }
        return;
    }
    Pack8 x[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        long long g = first + (long long)u * blockDim.x;
        if (g < full) x[u] = load8_stream(inp + g * 8);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        long long g = first + (long long)u * blockDim.x;
        if (g < full) {
            Pack8 y;
#pragma unroll
            for (int j = 0; j < 8; j++) y.v[j] = gelu_bf16(x[u].v[j]);
            store8_stream(out + g * 8, y);
        } else if (g == full) {  // the partial pack: at most 7 values
            for (long long i = full * 8; i < N; i++) out[i] = gelu_bf16(inp[i]);
        }
    }
}
