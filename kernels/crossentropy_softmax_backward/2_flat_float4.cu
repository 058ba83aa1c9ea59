/*
title = "128-bit loads and stores over the flattened tensor"
builds_on = 1
changed = "Each thread handles one float4 of the flattened (N*V) tensor; one division per float4 finds its row, then the four columns are walked with a wrap check. Streaming loads and stores."
why = """
The op is a stream: read probs, write dlogits, each once. A 16-byte load/store moves four times
the data per instruction, and one 32-bit division per four elements (instead of a 64-bit one per element) keeps
the integer work off the critical path. Treating the tensor as one flat array makes every float4
aligned whatever V is (a float4 may straddle two rows: the column wraps, and for V < 4 several
times). probs is read once and dlogits written once, so both use the streaming hints (__ldcs,
__stcs). The last N*V % 4 elements are done one by one. The loops are grid-stride, so the kernel
is correct for any grid; if either buffer is not 16-byte aligned (never for cudaMalloc'd ones)
everything takes the scalar path, up to four elements per thread: correct, slower.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "crossentropy_softmax_backward2"
grid = "cdiv(cdiv(N * V, 4), block_size)"
block = "block_size"
args = ["dlogits", "dlosses", "probs", "targets", "N", "V"]
*/
#include <cstdint>

// e / V, in 32 bits whenever the tensor is small enough (a 64-bit division is ~4x the work).
__device__ __forceinline__ int row_of(long long e, int V, bool small) {
    return small ? (int)((unsigned)e / (unsigned)V) : (int)(e / V);
}

__device__ __forceinline__ float grad(const float* dlosses, const int* targets, int row, int v, float p) {
    return (p - (v == targets[row] ? 1.0f : 0.0f)) * dlosses[row];
}

extern "C" __global__ void crossentropy_softmax_backward2(float* dlogits, const float* dlosses,
                                                          const float* probs, const int* targets,
                                                          int N, int V) {
    long long total = (long long)N * V;
    bool small = total <= 0xffffffffLL;
    bool aligned = (((uintptr_t)probs | (uintptr_t)dlogits) & 15) == 0;
    long long n4 = aligned ? total / 4 : 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const float4* p4 = reinterpret_cast<const float4*>(probs);
    float4* d4 = reinterpret_cast<float4*>(dlogits);

    for (long long i = first; i < n4; i += stride) {
        float4 p = __ldcs(p4 + i);
        long long e = 4 * i;
        int row = row_of(e, V, small), v = (int)(e - (long long)row * V);
        float g[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
        for (int c = 0; c < 4; c++) {
            while (v >= V) {  // the float4 crossed into the next row
                v -= V;
                row++;
            }
            g[c] = grad(dlosses, targets, row, v, g[c]);
            v++;
        }
        __stcs(d4 + i, make_float4(g[0], g[1], g[2], g[3]));
    }
    for (long long e = 4 * n4 + first; e < total; e += stride) {
        int row = row_of(e, V, small), v = (int)(e - (long long)row * V);
        dlogits[e] = grad(dlosses, targets, row, v, probs[e]);
    }
}
