/*
title = "bf16: eight values per 16-byte access, four packs per thread"
builds_on = 3
precision = "bf16"
changed = "Version 3's structure with bf16 storage: each 16-byte load now carries eight bf16 values (a Pack8) instead of four floats; each value is widened to float, the add is done in float, and the sum is rounded to bf16 once as it is stored."
why = """
The op is pure data movement, so halving the bytes per element halves the time: 6 bytes per
element instead of 12. The access pattern is version 3's, so nothing else changes: each thread
issues all eight of its 16-byte loads (four packs of each input, a block-width apart, so a
warp's accesses stay consecutive) before the first add, and streams them (used once). Per
instruction the loads move as many bytes as before, so the instruction count per byte halves
along with the bytes. Precision: bf16 keeps 8 significant bits; the add of two of them is exact
in float (unless their exponents are more than 16 apart), and the one rounding to bf16 costs at
most half an ulp, 0.4%: the pattern of every bf16 kernel here is to widen, compute in float and
round once. Tail and alignment as in version 3: the thread owning pack N/8 finishes the last
N % 8 elements, and unaligned buffers take a scalar path.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "residual_forward4"
grid = "cdiv(N, 32 * block_size)"
block = "block_size"
args = ["out", "inp1", "inp2", "N"]
*/
#include <stdint.h>

#include "bf16.cuh"  // bf16, Pack8, load8_stream/store8_stream, to_float/to_bf16

#define UNROLL 4  // packs of eight per thread

__device__ __forceinline__ Pack8 add8(const Pack8& a, const Pack8& b) {
    Pack8 r;
#pragma unroll
    for (int j = 0; j < 8; j++) r.v[j] = to_bf16(to_float(a.v[j]) + to_float(b.v[j]));
    return r;
}

extern "C" __global__ void residual_forward4(bf16* out, const bf16* inp1, const bf16* inp2, int N) {
    int first = blockIdx.x * blockDim.x * UNROLL + threadIdx.x;  // pack index (N < 2^31, so int)
    int full = N / 8;  // packs that lie entirely inside the array
    bool aligned = (((uintptr_t)out | (uintptr_t)inp1 | (uintptr_t)inp2) & 15) == 0;
    if (!aligned) {
        for (int u = 0; u < UNROLL; u++) {
            int base = (first + u * blockDim.x) * 8;
#pragma unroll 1  // rare paths: kept short so they do not cost the main path registers
            for (int i = base; i < base + 8 && i < N; i++) out[i] = to_bf16(to_float(inp1[i]) + to_float(inp2[i]));
        }
        return;
    }
    Pack8 a[UNROLL], b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        int g = first + u * blockDim.x;
        if (g < full) {
            a[u] = load8_stream(inp1 + g * 8);
            b[u] = load8_stream(inp2 + g * 8);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        int g = first + u * blockDim.x;
        if (g < full) {
            store8_stream(out + g * 8, add8(a[u], b[u]));
        } else if (g == full) {  // the partial pack: at most 7 elements
#pragma unroll 1
            for (int i = full * 8; i < N; i++) out[i] = to_bf16(to_float(inp1[i]) + to_float(inp2[i]));
        }
    }
}
