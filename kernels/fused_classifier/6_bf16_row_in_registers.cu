/*
title = "The bf16 row held in registers, packed: two rows per SM"
builds_on = 4
precision = "bf16"
changed = "Version 4's register cache at bf16, built as softmax_forward 10's: each thread loads its K slots of eight bf16 (four registers each) once, all up front and evict-first; an exact max on the packed pairs, the sum of exp(x - max) from the widened values, and after the block merge the gradient written from the same registers, widened again. No second read of the logits. At 128 and 256 threads two blocks share an SM."
why = """
Version 5 reads each row twice, the second time from L2. Kept packed, a 100 KB bf16 row takes
40% of an SM's registers, so two rows fit on one SM (K = 50 slots at 128 threads, 25 at 256,
51,200 columns, __launch_bounds__(_, 2)): one block loads while the other reduces and writes,
which version 4 (fp32, one row per SM) could not do, and at bf16 the load phase is half as long,
so that bubble would weigh twice as much. softmax_forward 10 tells the design and its price, a
second exp per element (~11 instructions an element, a quarter of what the SM can issue while
HBM moves the element's 4 bytes). What the classifier adds is version 5's: the slots cover whole
packs of real columns (the padding is written as zeros, never read); the head, the last 0-7 real
columns and packs beyond the slots are folded online and read again; the one-hot term is
subtracted in the pack that holds the target; thread 0 reads the target's logit before the
first barrier and writes the loss at the end, so no barrier follows the stores. 512 threads
(K = 13, one block per SM) is swept too; 1024 would leave 64 registers a thread, too few.
"""
block_sizes = [128, 256, 512]

[[launch]]
kernel = "fused_classifier6_b128"
when = "block_size == 128"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

[[launch]]
kernel = "fused_classifier6_b256"
when = "block_size == 256"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

[[launch]]
kernel = "fused_classifier6_b512"
when = "block_size == 512"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

# The quick run's cases (one build for softmax_bf16.cuh's packs, slots, byte permutes, bf16x2
# conversions and maxes). V = 51209 puts 6400-6401 packs of real columns in rows with heads 0,
# 5, 2: at 128 threads exactly the 6400 slots, or one pack past them (the overflow path). Nine
# rows of odd Vp start at every 16-byte offset; at 512 threads most slots are past the row.
[[emulate]]
sizes = [{ B = 1, T = 3, V = 51209, Vp = 51211 }]
runs = ["seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 3, T = 3, V = 1001, Vp = 1019 }]
runs = ["bs=512 seed=1 SHUFFLE order=3"]

# The rest, and padding of 8 columns with no packs.
[[emulate]]
slow = true  # coverage CI runs in its slow set
sizes = ["test", { B = 1, T = 9, V = 3, Vp = 11 }, { B = 3, T = 3, V = 1001, Vp = 1019 },
  { B = 1, T = 3, V = 51209, Vp = 51211 }]
runs = ["seed=2 PRIORITY", "bs=256 seed=3 PRIORITY", "bs=512 seed=4 SHUFFLE order=5"]
*/
#include <cfloat>
#include "bf16.cuh"            // bf16, to_float
#include "online_softmax.cuh"  // online_update, online_merge, block_online_merge
#include "softmax_bf16.cuh"    // Words8, split_row, load_slots, slots_pair, fold_packs, map_packs, classifier_grad8/1

// BLOCK threads per row, K register slots (eight bf16 in four registers) per thread: slot k holds
// pack tid + k*BLOCK of the row's body.
template <int BLOCK, int K>
__device__ __forceinline__ void classifier_row(bf16* logits, float* losses, const int* targets,
                                               float dloss, int V, int Vp) {
    int row = blockIdx.x, tid = threadIdx.x;
    bf16* x = logits + (size_t)row * Vp;
    int t = targets[row];
    int target = (t >= 0 && t < V) ? t : -1;  // -1 matches no column

    // [0, head): scalars up to the first 16-byte boundary; [head, rest): n8 packs of real columns;
    // [rest, Vp): scalars, the last real columns then the padding.
    RowSplit split = split_row(x, V, Vp);
    int head = split.head, n8 = split.n8, rest = split.rest;
    bf16* body = x + head;

    bf16* mine = body + 8 * tid;
    int left = n8 - tid;  // slot k is in the row iff k * BLOCK < left
    Words8 r[K];
    load_slots<BLOCK>(r, mine, left);  // every load issued before any is used
    float x_target = (tid == 0 && target >= 0) ? to_float(x[target]) : 0.0f;  // before any write
    float m_reg, s_reg;
    slots_pair(r, m_reg, s_reg);

    // Everything else that is real (head, the last 0-7 columns, packs beyond the slots), online;
    // it is read again below.
    float m = -FLT_MAX, s = 0.0f;
    for (int col = tid; col < min(head, V); col += BLOCK) online_update(m, s, to_float(x[col]));
    for (int col = rest + tid; col < V; col += BLOCK) online_update(m, s, to_float(x[col]));
    fold_packs<1>(m, s, body, tid + K * BLOCK, n8, BLOCK);

    online_merge(m, s, m_reg, s_reg);
    block_online_merge<BLOCK / 32>(m, s);  // its barriers also order the reads above before the writes below
    float b = 1.0f / s * dloss;             // expf(x - m) * b = softmax * dloss
    auto grad = [&](Words8 w, int i) { return classifier_grad8(w, head + 8 * i, m, b, dloss, target); };

#pragma unroll
    for (int k = 0; k < K; k++)
        if (k * BLOCK < left) store_words_stream(mine + 8 * k * BLOCK, grad(r[k], tid + k * BLOCK));
    for (int col = tid; col < head; col += BLOCK) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    for (int col = rest + tid; col < Vp; col += BLOCK) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    map_packs<1>(body, body, tid + K * BLOCK, n8, BLOCK, grad);

    if (tid == 0) losses[row] = target >= 0 ? logf(s) + m - x_target : __int_as_float(0x7fc00000);
}

// 128 and 256 threads: two blocks (two rows) per SM, so each thread may use 255 or 128 registers;
// 512 threads: one block per SM, 128 registers.
extern "C" __global__ void __launch_bounds__(128, 2)
fused_classifier6_b128(bf16* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<128, 50>(logits, losses, targets, dloss, V, Vp);
}
extern "C" __global__ void __launch_bounds__(256, 2)
fused_classifier6_b256(bf16* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<256, 25>(logits, losses, targets, dloss, V, Vp);
}
extern "C" __global__ void __launch_bounds__(512, 1)
fused_classifier6_b512(bf16* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<512, 13>(logits, losses, targets, dloss, V, Vp);
}
