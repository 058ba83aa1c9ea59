/*
title = "bf16 in and out: version 7's two passes at half the bytes"
builds_on = 7
precision = "bf16"
changed = "inp and out are bf16: each row's body moves eight values (16 bytes) per access from the row's first 16-byte boundary, widened to float for the online (max, sum) pair and the exp, rounded once to bf16 on the store; the pair is folded eight values at a time."
why = """
The first step to bf16, with version 7's structure kept: one block per row, a first pass folding
the row into a (max, sum) pair in float, one block merge, a second pass that re-reads the row
(from L2, evict-first) and writes the probabilities with streaming stores. Only storage changes:
half the bytes per element, so at the same bandwidth the kernel should take half version 7's
time, and a 100 KB row (two per SM at 1024 threads: ~26 MB of rows in flight) sits in L2 more
comfortably for its second read than version 7's 200 KB. The arithmetic stays float and rounds
once per output, so per byte there is twice the work: the pair is folded eight values at a time
(nine exps per eight values instead of the five per four of online_update4). V = 50257 is odd:
a row starts on any even address, so each row takes 0-7 scalar columns up to its 16-byte
boundary, whole packs of eight, then 0-7 scalars. If out and inp are misaligned differently
(never for cudaMalloc'd buffers), the row is done in scalars: correct, slower.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward9"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

# Nine rows of odd length start at every 16-byte offset (0-7 scalar columns before the packs).
[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = ["test", { N = 9, V = 5 }, { N = 9, V = 1001 }]
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <cfloat>
#include <cstdint>
#include "bf16.cuh"            // bf16, to_float, to_bf16
#include "online_softmax.cuh"  // online_update, block_online_merge
#include "softmax_bf16.cuh"    // Words8, split_row, fold_packs, map_packs, softmax8

#define UNROLL 4


extern "C" __global__ void softmax_forward9(bf16* out, const bf16* inp, int N, int V) {
    int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    const bf16* x = inp + (size_t)row * V;
    bf16* y = out + (size_t)row * V;

    // [0, head): scalars up to x's first 16-byte boundary; [head, tail): n8 packs; [tail, V): scalars.
    // All scalars if y would not be aligned where x is (never for cudaMalloc'd buffers).
    RowSplit split = split_row(x, V, V, (((uintptr_t)x ^ (uintptr_t)y) & 15) == 0);
    int head = split.head, n8 = split.n8, tail = split.rest;

    float m = -FLT_MAX, s = 0.0f;
    for (int i = tid; i < head; i += nt) online_update(m, s, to_float(x[i]));
    for (int i = tail + tid; i < V; i += nt) online_update(m, s, to_float(x[i]));
    fold_packs<UNROLL>(m, s, x + head, tid, n8, nt);  // plain loads: the second pass wants the row in L2
    block_online_merge(m, s);
    float inv = 1.0f / s;

    for (int i = tid; i < head; i += nt) y[i] = to_bf16(expf(to_float(x[i]) - m) * inv);
    for (int i = tail + tid; i < V; i += nt) y[i] = to_bf16(expf(to_float(x[i]) - m) * inv);
    map_packs<UNROLL>(y + head, x + head, tid, n8, nt, [&](Words8 w, int) { return softmax8(w, m, inv); });
}
