/*
title = "bf16: version 10's two changes on version 5 (ids asked of L2 at the start, wpe before the token)"
builds_on = 5
precision = "bf16"
changed = "Version 5's grid of Pack8 threads with version 10's changes: block 0 asks L2 for all of inp with one bulk prefetch, and each thread loads its wpe Pack8 before its token, so only the wte load waits for the token (an L2 hit for every block after the first wave)."
why = """
Version 10 measures where the gather's time goes (the token's round trip, more than the rows'
pattern) and explains both changes. At bf16 the op moves half the bytes in the same number of
threads' round trips, so the token's share of the time is larger. Version 7 (persistent warps,
the next row's token loaded a row ahead) gets about as far by reshaping the grid; this one keeps
version 5's shape.

The prediction and the measurements: results/notes/encoder_forward.md.
"""
preconditions = ["C % 8 == 0"]
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward11"
grid = "cdiv(N * C // 8, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 1, T = 3, C = 8, V = 7 }, { B = 3, T = 5, C = 16, V = 100 },
  { B = 2, T = 9, C = 784, V = 50 }, { B = 5, T = 67, C = 64, V = 300 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1",
  "bs=512 seed=0 SHUFFLE", "bs=1024 seed=1 PRIORITY sms=1"]
*/
#include "bf16.cuh"         // bf16, Pack8, load8/store8_stream, to_float/to_bf16
#include "l2_prefetch.cuh"  // prefetch_l2_ints: inp asked of L2 in one instruction (sm_90)

extern "C" __global__ void encoder_forward11(bf16* out, const int* __restrict__ inp,
                                             const bf16* __restrict__ wte,
                                             const bf16* __restrict__ wpe, int B, int T, int C,
                                             int V) {
    if (blockIdx.x == 0 && threadIdx.x == 0) prefetch_l2_ints(inp, B * T);
    int C8 = C / 8;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // which Pack8 of out
    if (idx >= B * T * C8) return;
    int bt = idx / C8, c8 = idx % C8;
    int t = bt % T;
    Pack8 p = load8(wpe + (size_t)t * C + (size_t)c8 * 8);  // needs no token
    int token = __ldg(inp + bt);
    Pack8 sum;
    if (token < 0 || token >= V) {  // outside the vocabulary: NaN, loudly
        for (int j = 0; j < 8; j++) sum.v[j] = to_bf16(__int_as_float(0x7fc00000));
    } else {
        Pack8 w = load8(wte + (size_t)token * C + (size_t)c8 * 8);
#pragma unroll
        for (int j = 0; j < 8; j++) sum.v[j] = to_bf16(to_float(w.v[j]) + to_float(p.v[j]));
    }
    store8_stream(out + (size_t)idx * 8, sum);
}
