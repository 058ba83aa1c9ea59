/*
title = "The row held in registers: one read, one write"
builds_on = 7
changed = "Each thread loads its float4 slots of the row into registers once (all loads issued up front), exponentiates them in place against its own maximum, and after the block merge only scales and stores them; no second read."
why = """
Version 7 still reads every row twice and counts on L2 for the second read. An SM has 256 KB of
registers, enough for one 200 KB row: each thread keeps K float4 slots (fixed at compile time,
hence one kernel per block size: K = 50 at 256 threads, 25 at 512, both covering rows up to 51200
floats; 13 at 768 and 10 at 1024, where the 64-80 register budget leaves room for ~40K floats), so
the row crosses the memory bus once each way, the minimum. With the values on chip, each thread
takes an exact max over its slots, stores e = exp(x - m_thread) in place (one exp per element), and
after the block merge of (max, sum) pairs the output is e * exp(m_thread - M) / S: a multiply.
All of a thread's K loads are issued before any is used, ~200 KB per SM in flight. The cost: one
block per SM, so an SM's loads stop while its block reduces and stores; the grid's 62 waves drift
out of step across SMs, which should hide much of it. Float4 beyond the slots (rows longer than
the cache, or the ~20% of a 50257 row at 768/1024 threads) are read a second time, from L2, as in
version 7: always correct, at any V.
"""
block_sizes = [256, 512, 768, 1024]

[[launch]]
kernel = "softmax_forward8_b256"
when = "block_size == 256"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[launch]]
kernel = "softmax_forward8_b512"
when = "block_size == 512"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[launch]]
kernel = "softmax_forward8_b768"
when = "block_size == 768"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[launch]]
kernel = "softmax_forward8_b1024"
when = "block_size == 1024"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[emulate]]
when = "N * V <= 120000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <cfloat>
#include <cstdint>
#include "online_softmax.cuh"  // online_update/4, online_merge, block_online_merge

__device__ __forceinline__ float4 scale4(float4 v, float a) {
    return make_float4(v.x * a, v.y * a, v.z * a, v.w * a);
}

// BLOCK threads per row, K float4 register slots per thread: slot k holds float4 tid + k*BLOCK.
template <int BLOCK, int K>
__device__ void softmax_row(float* out, const float* inp, int V) {
    int row = blockIdx.x, tid = threadIdx.x;
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

    float4 r[K];
#pragma unroll
    for (int k = 0; k < K; k++) {  // every load issued before any is used
        int i = tid + k * BLOCK;
        r[k] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    // The register slots: exact max, then e = exp(x - m_reg) kept in place.
    float m_reg = -FLT_MAX;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (tid + k * BLOCK < n4) m_reg = fmaxf(m_reg, fmaxf(fmaxf(r[k].x, r[k].y), fmaxf(r[k].z, r[k].w)));
    float s_reg = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (tid + k * BLOCK < n4) {
            r[k] = make_float4(expf(r[k].x - m_reg), expf(r[k].y - m_reg), expf(r[k].z - m_reg),
                               expf(r[k].w - m_reg));
            s_reg += (r[k].x + r[k].y) + (r[k].z + r[k].w);
        }
    }

    // Everything else (head, tail, float4 beyond the slots), online; it is read again below.
    float m = -FLT_MAX, s = 0.0f;
    for (int i = tid; i < head; i += BLOCK) online_update(m, s, x[i]);
    for (int i = tail + tid; i < V; i += BLOCK) online_update(m, s, x[i]);
    for (int i = tid + K * BLOCK; i < n4; i += BLOCK) online_update4(m, s, x4[i]);

    float m_thread = m, s_thread = s;
    online_merge(m_thread, s_thread, m_reg, s_reg);
    block_online_merge<BLOCK / 32>(m_thread, s_thread);
    float M = m_thread, inv = 1.0f / s_thread;

    float a = expf(m_reg - M) * inv;  // e * a = exp(x - M) / S for the register slots
#pragma unroll
    for (int k = 0; k < K; k++) {
        int i = tid + k * BLOCK;
        if (i < n4) __stcs(y4 + i, scale4(r[k], a));
    }
    for (int i = tid; i < head; i += BLOCK) y[i] = expf(x[i] - M) * inv;
    for (int i = tail + tid; i < V; i += BLOCK) y[i] = expf(x[i] - M) * inv;
    for (int i = tid + K * BLOCK; i < n4; i += BLOCK) {
        float4 v = __ldcs(x4 + i);
        __stcs(y4 + i, make_float4(expf(v.x - M) * inv, expf(v.y - M) * inv, expf(v.z - M) * inv,
                                   expf(v.w - M) * inv));
    }
}

// One block per SM is the design (the row fills the register file), so each kernel may use
// all 65536 / BLOCK registers per thread.
extern "C" __global__ void __launch_bounds__(256, 1) softmax_forward8_b256(float* out, const float* inp, int N, int V) {
    softmax_row<256, 50>(out, inp, V);
}
extern "C" __global__ void __launch_bounds__(512, 1) softmax_forward8_b512(float* out, const float* inp, int N, int V) {
    softmax_row<512, 25>(out, inp, V);
}
extern "C" __global__ void __launch_bounds__(768, 1) softmax_forward8_b768(float* out, const float* inp, int N, int V) {
    softmax_row<768, 13>(out, inp, V);
}
extern "C" __global__ void __launch_bounds__(1024, 1) softmax_forward8_b1024(float* out, const float* inp, int N, int V) {
    softmax_row<1024, 10>(out, inp, V);
}
