/*
title = "128-bit packed loads and stores, scalar tail"
builds_on = 1
changed = "Each thread handles four consecutive elements through one float4 load per input and one float4 store; the last N % 4 take a scalar path."
why = """
Same bytes, a quarter of the memory instructions: two 16-byte loads and one 16-byte store per
thread instead of eight scalar ones, with 32 bytes per thread in flight. The streaming hints
(__ldcs/__stcs) mark the data as used once so it does not evict reusable lines from L2.
Correct for any N and any pointers: unaligned buffers send the whole launch down the scalar
path, and the thread owning the last partial group of four finishes it element by element.
Same cancellation-free logistic form of the derivative as version 1.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "gelu_backward2"
grid = "cdiv(N, 4 * block_size)"
block = "block_size"
args = ["dinp", "inp", "dout", "N"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <stdint.h>
#include "gelu.cuh"  // gelu_grad(x), as in version 1

extern "C" __global__ void gelu_backward2(float* dinp, const float* inp, const float* dout, int N) {
    long long i4 = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long base = i4 * 4;
    if (base >= N) return;
    bool aligned = (((uintptr_t)dinp | (uintptr_t)inp | (uintptr_t)dout) & 15) == 0;
    if (aligned && base + 4 <= N) {
        float4 x = __ldcs(reinterpret_cast<const float4*>(inp) + i4);
        float4 d = __ldcs(reinterpret_cast<const float4*>(dout) + i4);
        float4 r = make_float4(gelu_grad(x.x) * d.x, gelu_grad(x.y) * d.y,
                               gelu_grad(x.z) * d.z, gelu_grad(x.w) * d.w);
        __stcs(reinterpret_cast<float4*>(dinp) + i4, r);
    } else {
        long long end = base + 4 < N ? base + 4 : N;
        for (long long i = base; i < end; i++) dinp[i] = gelu_grad(inp[i]) * dout[i];
    }
}
