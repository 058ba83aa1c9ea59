/*
title = "bf16 logits: version 3's two passes at half the bytes"
builds_on = 3
precision = "bf16"
changed = "The logits are bf16: the body of each row moves in packs of eight bf16 (16 bytes, one access) from the row's first 16-byte boundary, widened to float for the online (max, sum) pair and the gradient, rounded once to bf16 on the store. The real columns end the vector body (version 4's split), so the padding is written as zeros without being read; the one-hot term is subtracted in the pack that holds the target, and thread 0 reads the target's logit for the loss."
why = """
The first step to bf16, with version 3's structure kept: one block per row, a first pass folding
the row into a (max, sum) pair in float, one block merge, a second pass re-reading the row (from
L2: a 100 KB bf16 row, two per SM at 1024 threads, ~26 MB in flight against a 50 MB L2) and
overwriting it with the gradient. Only storage changes: half the bytes per element, so at the
same bandwidth the kernel should take half version 3's time. The arithmetic stays float (the loss
is computed exactly as at fp32; each dlogit is rounded once, on its store), so per byte there is
twice the work: the pair is folded eight values at a time (nine exps per pack, not sixteen), and
in the second pass the target test is one compare per pack instead of one per element. A row of
GPT-2's 50304 columns starts on a 16-byte boundary; any other Vp gives rows that start anywhere,
so each row takes 0-7 scalar columns up to its boundary, whole packs of real columns, then
scalars: the last 0-7 real columns and the padding, which is written (zeros) and never read.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "fused_classifier5"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

# Nine rows of odd Vp start at every 16-byte offset; padding of 8 and 18 columns.
[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = ["test", { B = 1, T = 9, V = 3, Vp = 11 }, { B = 3, T = 3, V = 1001, Vp = 1019 }]
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include <cfloat>
#include "bf16.cuh"            // bf16, to_float
#include "online_softmax.cuh"  // online_update, block_online_merge
#include "softmax_bf16.cuh"    // split_row, fold_packs, map_packs, classifier_grad8/1

#define UNROLL 4

extern "C" __global__ void fused_classifier5(bf16* logits, float* losses, const int* targets,
                                             float dloss, int N, int V, int Vp) {
    int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    bf16* x = logits + (size_t)row * Vp;
    int t = targets[row];
    int target = (t >= 0 && t < V) ? t : -1;  // -1 matches no column

    // [0, head): scalars up to the first 16-byte boundary; [head, rest): n8 packs of real columns;
    // [rest, Vp): scalars, the last real columns then the padding.
    RowSplit split = split_row(x, V, Vp);
    int head = split.head, n8 = split.n8, rest = split.rest;
    bf16* body = x + head;

    float m = -FLT_MAX, s = 0.0f;
    for (int col = tid; col < min(head, V); col += nt) online_update(m, s, to_float(x[col]));
    for (int col = rest + tid; col < V; col += nt) online_update(m, s, to_float(x[col]));
    fold_packs<UNROLL>(m, s, body, tid, n8, nt);  // plain loads: the second pass wants the row in L2
    float x_target = (tid == 0 && target >= 0) ? to_float(x[target]) : 0.0f;

    block_online_merge(m, s);  // its barriers also order every read above before every write below
    if (tid == 0) losses[row] = target >= 0 ? logf(s) + m - x_target : __int_as_float(0x7fc00000);
    float b = 1.0f / s * dloss;  // expf(x - m) * b = softmax * dloss

    for (int col = tid; col < head; col += nt) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    for (int col = rest + tid; col < Vp; col += nt) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    map_packs<UNROLL>(body, body, tid, n8, nt, [&](Words8 w, int i) {
        return classifier_grad8(w, head + 8 * i, m, b, dloss, target);
    });
}
