/*
title = "128-bit packed loads and stores, scalar tail"
builds_on = 1
changed = "Each thread handles four consecutive floats through one float4 load and one float4 store; the last N % 4 elements take a scalar path."
why = """
Same bytes, a quarter of the memory instructions: one 16-byte load and one 16-byte store per
thread instead of four of each, with 16 bytes per thread in flight. The streaming hints
(__ldcs/__stcs) mark the data as used once, so it does not evict what other kernels will reuse
from L2. Correct for any N and any pointers: unaligned buffers (slices at odd offsets) send the
whole launch down the scalar path, and the thread owning the last partial group of four
finishes it element by element. Same logistic form of the GELU as version 1 (tanhf is only an
approximation under --use_fast_math).
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "gelu_forward2"
grid = "cdiv(N, 4 * block_size)"
block = "block_size"
args = ["out", "inp", "N"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <stdint.h>
#include "gelu.cuh"  // gelu(x), as in version 1

extern "C" __global__ void gelu_forward2(float* out, const float* inp, int N) {
    long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long base = i4 * 4;
    if (base >= N) return;
    bool aligned = (((uintptr_t)out | (uintptr_t)inp) & 15) == 0;
    if (aligned && base + 4 <= N) {
        float4 x = __ldcs(reinterpret_cast<const float4*>(inp) + i4);
        __stcs(reinterpret_cast<float4*>(out) + i4, make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w)));
    } else {
        long long end = base + 4 < N ? base + 4 : N;
        for (long long i = base; i < end; i++) out[i] = gelu(inp[i]);
    }
}
