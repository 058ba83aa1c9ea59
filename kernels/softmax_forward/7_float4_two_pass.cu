/*
title = "128-bit loads from the row's first 16-byte boundary, unrolled, streaming second pass"
builds_on = 6
changed = "The row is split into a scalar head up to the first 16-byte boundary, a float4 body and a scalar tail; each thread issues 4 float4 loads before using any; the second pass reads with __ldcs and writes with __stcs."
why = """
One load instruction now moves 16 bytes instead of 4, and four independent loads per thread are in
flight at once (64 KB per 1024-thread block), which is what it takes to keep HBM busy. V = 50257
is odd, so row r starts at byte 4*r*V: only one row in four is 16-byte aligned. Instead of
requiring V % 4 == 0, each row computes its own head (0-3 elements up to the boundary), so every
row gets the vector body. The row is still read twice, but the first pass's loads keep it in L2
(one 200 KB row per block, ~130-260 rows in flight: 26-53 MB against a 50 MB L2), so the second
pass should mostly hit L2: it reads with evict-first (__ldcs) and the output is written with
streaming stores (__stcs), neither of which should push the next rows out of L2.
If out and inp are misaligned differently (never for cudaMalloc'd buffers) the row falls back to
scalar loads: correct, slower.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward7"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "N * V <= 120000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <cfloat>
#include <cstdint>
#include "online_softmax.cuh"  // online_update/4, block_online_merge: version 6's pairs

#define UNROLL 4

extern "C" __global__ void softmax_forward7(float* out, const float* inp, int N, int V) {
    int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    // [0, head): scalars up to x's first 16-byte boundary; [head, tail): n4 float4; [tail, V): scalars.
    int head = (int)((16 - ((uintptr_t)x & 15)) & 15) / 4;
    if (((uintptr_t)x ^ (uintptr_t)y) & 15) head = V;  // y would not be aligned where x is
    head = min(head, V);
    int n4 = (V - head) / 4;
    int tail = head + 4 * n4;
    const float4* x4 = reinterpret_cast<const float4*>(x + head);
    float4* y4 = reinterpret_cast<float4*>(y + head);

    float m = -FLT_MAX, s = 0.0f;
    for (int i = tid; i < head; i += nt) online_update(m, s, x[i]);
    for (int i = tail + tid; i < V; i += nt) online_update(m, s, x[i]);
    for (int base = tid; base < n4; base += UNROLL * nt) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {  // all loads first: UNROLL requests in flight
            int i = base + u * nt;
            v[u] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            if (base + u * nt < n4) online_update4(m, s, v[u]);
    }
    block_online_merge(m, s);
    float inv = 1.0f / s;

    for (int i = tid; i < head; i += nt) y[i] = expf(x[i] - m) * inv;
    for (int i = tail + tid; i < V; i += nt) y[i] = expf(x[i] - m) * inv;
    for (int base = tid; base < n4; base += UNROLL * nt) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * nt;
            v[u] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * nt;
            if (i < n4) {
                float4 r;
                r.x = expf(v[u].x - m) * inv;
                r.y = expf(v[u].y - m) * inv;
                r.z = expf(v[u].z - m) * inv;
                r.w = expf(v[u].w - m) * inv;
                __stcs(y4 + i, r);
            }
        }
    }
}
