/*
title = "Version 10 with two independent gathers a thread: two token round trips in flight where version 10 has one"
changed = "Version 10's float4 threads, half as many: thread i handles float4 i and float4 i + S (S = the grid's thread count, so the two are in different halves of the batch, different tokens, and each half is still read and written in coalesced runs). Both wpe loads and both token loads are issued first, then both wte loads, then both stores: two independent token -> row chains per thread."
why = """
What is left of version 10's gap to the copy (its header) is the wait between a thread's token and
its row: while a thread waits for its token it has only its wpe float4 in flight, and with
2048 threads an SM that is too few bytes in flight for DRAM's latency while the first wave waits
on its ids. A thread with two items issues both token loads together, so each thread keeps twice
the bytes in flight through the same wait; the SM's thread count is unchanged (28 registers).
More items a thread pay back less: with three or four 0.92-0.95x, with eight 0.86-0.88x (fewer blocks
to spread over the SMs, and the last wave's imbalance larger); at bf16 (Pack8 threads, half the
threads of fp32 already) two items a thread lost: 0.90-0.94x against version 11's 0.96-0.97x.

Measured on the H100 (2026-11-25, bench encoder_forward, experiment copies beside version 10,
seven runs, L2 flushed, best block size each; results/h100-encoder-forward-two-rows-2026-11-25.txt):
25.2, 25.5, 25.5, 25.7, 25.5, 25.3 and 25.7 us against version 10's 25.9, 25.7, 25.8, 25.9,
26.0, 25.6 and 25.8 in the same runs: faster in all seven, by 1.4% on average; against the copy
0.94-0.965x (median 0.949), version 10 0.93-0.947x. Three more runs with it in the family: 25.5,
25.3 and 25.6 us (0.93-0.947x), version 10 25.8, 25.6 and 25.8.

Tried after (not kept, same file): persistent grids of one wave (SMS x 2048 threads), each thread
looping over its items with the next item's token loaded while this item's row is in flight:
one item an iteration 25.6-25.8 us (0.92-0.94x), two 26.8-27.1; at bf16 0.89-0.92x and
0.86-0.90x against version 11's 0.94-0.97x. The loop's serial iterations lose more than the
quantised last wave costs. Also tried (2026-11-25, six runs): the wte load with an L2 sector
promotion hint (ld.global.nc.L2::256B, 128B or 64B, so that L2 fetches a row's DRAM bytes in
larger pieces): 256B 25.9-26.1 us (slower), 128B and 64B 25.0-25.6, the same as this version's
25.1-25.5 beside them; at bf16 256B on version 11 15.1-15.4 against 14.9-15.0.
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
