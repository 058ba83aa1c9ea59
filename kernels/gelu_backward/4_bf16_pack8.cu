/*
title = "bf16 storage: eight values per 16-byte access, derivative in fp32"
builds_on = 3
precision = "bf16"
changed = "Version 3 at bf16: inp, dout and dinp hold bf16, so each 16-byte access carries eight values (a Pack8) instead of four; both inputs are widened to fp32, the derivative and the product are computed there, and dinp is rounded once to bf16. Two packs of each input per thread (16 values), all loaded before the first derivative; the tail (N % 8) and unaligned buffers take a scalar path."
why = """
Memory-bound, so half the bytes is half the time: 6 bytes per element instead of 12. The access
pattern is version 3's, each step u of a block reading consecutive packs, so every access is
coalesced, with four independent 16-byte loads in flight per thread (two packs of inp, two of
dout). Version 3's four of each would be 128 bytes a thread, but at sm_90 the compiler then
keeps 94 registers a thread: a block of 1024 could not launch and three quarters of the thread
slots would stay empty; two of each take 48 registers, and 64 bytes a thread over ~1280 resident
threads is still ~80 KB in flight per SM, more than the memory system needs to stay busy. The
arithmetic stays in fp32 (bf16 keeps 8 significant bits): the only new error is dinp's one
rounding, 2^-8 relative at most.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "gelu_backward4"
grid = "cdiv(N, 16 * block_size)"  # UNROLL packs of 8 per thread
block = "block_size"
args = ["dinp", "inp", "dout", "N"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <stdint.h>
#include "bf16.cuh"  // bf16, Pack8, load8_stream/store8_stream, to_float/to_bf16
#include "gelu.cuh"  // gelu_grad(x), as in version 1

#define UNROLL 2

__device__ __forceinline__ bf16 dgelu_bf16(bf16 x, bf16 d) {
    return to_bf16(gelu_grad(to_float(x)) * to_float(d));
}

extern "C" __global__ void gelu_backward4(bf16* dinp, const bf16* inp, const bf16* dout, int N) {
    long long first = (long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x;  // Pack8 index
    long long full = N / 8;  // packs of eight that lie entirely inside the array
    bool aligned = (((uintptr_t)dinp | (uintptr_t)inp | (uintptr_t)dout) & 15) == 0;
    if (!aligned) {
        for (int u = 0; u < UNROLL; u++) {
            long long base = (first + (long long)u * blockDim.x) * 8;
            for (long long i = base; i < base + 8 && i < N; i++)
                dinp[i] = dgelu_bf16(inp[i], dout[i]);
        }
        return;
    }
    Pack8 x[UNROLL], d[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        long long g = first + (long long)u * blockDim.x;
        if (g < full) {
            x[u] = load8_stream(inp + g * 8);
            d[u] = load8_stream(dout + g * 8);
        }
    }
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        long long g = first + (long long)u * blockDim.x;
        if (g < full) {
            Pack8 y;
#pragma unroll
            for (int j = 0; j < 8; j++) y.v[j] = dgelu_bf16(x[u].v[j], d[u].v[j]);
            store8_stream(dinp + g * 8, y);
        } else if (g == full) {  // the partial pack: at most 7 values
            for (long long i = full * 8; i < N; i++) dinp[i] = dgelu_bf16(inp[i], dout[i]);
        }
    }
}
