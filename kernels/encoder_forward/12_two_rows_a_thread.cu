/*
title = "Version 10 with two independent gathers a thread: two token round trips in flight where version 10 has one"
builds_on = 10
changed = "Version 10's float4 threads, half as many: thread i handles float4 i and float4 i + S (S = the grid's thread count, so the two are in different halves of the batch, different tokens, and each half is still read and written in coalesced runs). Both wpe loads and both token loads are issued first, then both wte loads, then both stores: two independent token -> row chains per thread."
why = """
What is left of version 10's gap to the copy (its header) is the wait between a thread's token and
its row: while a thread waits for its token it has only its wpe float4 in flight, and with
2048 threads an SM that is too few bytes in flight for DRAM's latency while the first wave waits
on its ids. A thread with two items issues both token loads together, so each thread keeps twice
the bytes in flight through the same wait; the SM's thread count is unchanged (28 registers).
More items a thread pay back less (fewer blocks to spread over the SMs, and the last wave's
imbalance larger); at bf16 (Pack8 threads, half the threads of fp32 already) two items a thread
lost against version 11.

Measured faster than version 10 in every run. Persistent one-wave grids and L2 sector-promotion
hints were tried after and not kept. The numbers: results/notes/encoder_forward.md.
"""
preconditions = ["C % 4 == 0"]
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward12"
grid = "cdiv(N * C // 4, block_size * 2)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 1, T = 3, C = 8, V = 7 }, { B = 3, T = 5, C = 16, V = 100 },
  { B = 2, T = 9, C = 784, V = 50 }, { B = 5, T = 67, C = 64, V = 300 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1",
  "bs=512 seed=0 SHUFFLE", "bs=1024 seed=1 PRIORITY sms=1"]
*/
#include "l2_prefetch.cuh"  // prefetch_l2_ints: inp asked of L2 in one instruction (sm_90)

constexpr int ITEMS = 2;  // float4 of out a thread writes, a grid's width apart

extern "C" __global__ void encoder_forward12(float* out, const int* __restrict__ inp,
                                             const float* __restrict__ wte,
                                             const float* __restrict__ wpe, int B, int T, int C,
                                             int V) {
    if (blockIdx.x == 0 && threadIdx.x == 0) prefetch_l2_ints(inp, B * T);
    int C4 = C / 4, total = B * T * C4;  // 32-bit: N * C < 2^31 (family precondition)
    int stride = gridDim.x * blockDim.x;
    int first = blockIdx.x * blockDim.x + threadIdx.x;
    int token[ITEMS];
    float4 p[ITEMS], w[ITEMS];
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {  // both positions' wpe and tokens, before any waits
        int idx = first + k * stride;
        token[k] = -1;
        if (idx < total) {
            int bt = idx / C4, t = bt % T;
            p[k] = __ldg(reinterpret_cast<const float4*>(wpe + (size_t)t * C) + idx % C4);
            token[k] = __ldg(inp + bt);
        }
    }
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {  // both rows
        int idx = first + k * stride;
        if (idx < total && token[k] >= 0 && token[k] < V)
            w[k] = __ldg(reinterpret_cast<const float4*>(wte + (size_t)token[k] * C) + idx % C4);
    }
#pragma unroll
    for (int k = 0; k < ITEMS; k++) {
        int idx = first + k * stride;
        if (idx >= total) continue;
        float4 o;
        if (token[k] < 0 || token[k] >= V) {  // outside the vocabulary: NaN, loudly
            float nan = __int_as_float(0x7fc00000);
            o = make_float4(nan, nan, nan, nan);
        } else {
            o = make_float4(w[k].x + p[k].x, w[k].y + p[k].y, w[k].z + p[k].z, w[k].w + p[k].w);
        }
        __stcs(reinterpret_cast<float4*>(out) + idx, o);
    }
}
