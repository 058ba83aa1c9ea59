/*
title = "The bf16 row held in registers, packed: two rows per SM"
builds_on = 8
precision = "bf16"
changed = "Version 8's register cache at bf16, kept packed: each thread loads its K slots of eight bf16 (four registers each) once, all loads up front with evict-first hints; takes an exact max over them in bf16 pairs; sums exp(x - max) from the widened values; after the block merge widens the same registers again and writes exp(x - M) / S. No second read of the row. Slots past the row hold -inf, so the max and the sum need no test. At 128 and 256 threads two blocks share an SM."
why = """
Version 9 reads each row twice, the second time from L2. A 100 KB bf16 row fits in registers
twice over: kept packed (two bf16 a register) it takes 40% of an SM's register file, so two
blocks, two rows, fit on one SM: K = 50 slots at 128 threads or 25 at 256 (51,200 columns, at
most 255 or 128 registers a thread: __launch_bounds__(_, 2)). That is the point of this version.
Version 8 (fp32) kept one row per SM, and the SM stopped loading while its block reduced and
stored; here one block can load while the other reduces, and at bf16 the load phase is half as
long, so that bubble would weigh twice as much. The price of packed slots is a second exp per
element (for the sum, then for the output): ~10 instructions per element in all, about a quarter
of what an SM can issue while HBM moves the element's 4 bytes. The max costs 1/4 instruction per
element: max is exact in bf16, so it runs on the packed pairs (max.bf16x2) and only its result is
widened. Registers are the budget, and two details keep the slots in them: the slots are uint4
words, not Pack8 (whose eight 16-bit values the compiler gives a register each), and the output
pass widens them with byte permutes where the sum used shifts (unpack8_again), so the compiler
widens again instead of keeping the sum's floats, twice the slots' size, alive across the merge;
without either, the 256-thread kernel spilled. 512 threads (K = 13, one block per SM) is swept
too; 1024 threads would leave 64 registers a thread, too few for 7 slots and the rest. The row's
split is version 9's (0-7 scalar columns up to x's 16-byte boundary, packs, 0-7 scalars); the
scalars and packs beyond the slots (rows longer than 51,200, or out and inp misaligned
differently) are folded online and read a second time, from L2: correct at any V.
"""
block_sizes = [128, 256, 512]

[[launch]]
kernel = "softmax_forward10_b128"
when = "block_size == 128"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[launch]]
kernel = "softmax_forward10_b256"
when = "block_size == 256"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[launch]]
kernel = "softmax_forward10_b512"
when = "block_size == 512"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

# Nine rows of odd length start at every 16-byte offset; V = 51209 puts 6400-6401 packs in rows
# with heads 0, 7, 6: exactly the 6400 slots of 128 and 256 threads, or one pack past them (the
# overflow path, as V = 60001 throughout).
[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = ["test", { N = 9, V = 5 }, { N = 9, V = 1001 }, { N = 3, V = 51209 }]
runs = ["seed=0 PRIORITY", "bs=256 seed=2 PRIORITY", "bs=512 seed=1 SHUFFLE order=3"]
*/
#include <cfloat>
#include <cstdint>
#include "bf16.cuh"            // bf16, to_float, to_bf16
#include "online_softmax.cuh"  // online_update, online_merge, block_online_merge
#include "softmax_bf16.cuh"    // Words8, split_row, load_slots, slots_pair, fold_packs, map_packs, softmax8

// BLOCK threads per row, K register slots (eight bf16 in four registers) per thread: slot k holds
// pack tid + k*BLOCK of the row's body.
template <int BLOCK, int K>
__device__ __forceinline__ void softmax_row(bf16* out, const bf16* inp, int V) {
    int row = blockIdx.x, tid = threadIdx.x;
    const bf16* x = inp + (size_t)row * V;
    bf16* y = out + (size_t)row * V;

    // [0, head): scalars up to x's first 16-byte boundary; [head, tail): n8 packs; [tail, V): scalars.
    // All scalars if y would not be aligned where x is (never for cudaMalloc'd buffers).
    RowSplit split = split_row(x, V, V, (((uintptr_t)x ^ (uintptr_t)y) & 15) == 0);
    int head = split.head, n8 = split.n8, tail = split.rest;

    int left = n8 - tid;  // slot k is in the row iff k * BLOCK < left
    Words8 r[K];
    load_slots<BLOCK>(r, x + head + 8 * tid, left);  // every load issued before any is used
    float m_reg, s_reg;
    slots_pair(r, m_reg, s_reg);

    // Everything else (head, tail, packs beyond the slots), online; it is read again below.
    float m = -FLT_MAX, s = 0.0f;
    for (int i = tid; i < head; i += BLOCK) online_update(m, s, to_float(x[i]));
    for (int i = tail + tid; i < V; i += BLOCK) online_update(m, s, to_float(x[i]));
    fold_packs<1>(m, s, x + head, tid + K * BLOCK, n8, BLOCK);

    online_merge(m, s, m_reg, s_reg);
    block_online_merge<BLOCK / 32>(m, s);
    float inv = 1.0f / s;

    bf16* mine = y + head + 8 * tid;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (k * BLOCK < left) store_words_stream(mine + 8 * k * BLOCK, softmax8(r[k], m, inv));
    for (int i = tid; i < head; i += BLOCK) y[i] = to_bf16(expf(to_float(x[i]) - m) * inv);
    for (int i = tail + tid; i < V; i += BLOCK) y[i] = to_bf16(expf(to_float(x[i]) - m) * inv);
    map_packs<1>(y + head, x + head, tid + K * BLOCK, n8, BLOCK, [&](Words8 w, int) { return softmax8(w, m, inv); });
}

// 128 and 256 threads: two blocks (two rows) per SM, so each thread may use 255 or 128 registers;
// 512 threads: one block per SM, 128 registers.
extern "C" __global__ void __launch_bounds__(128, 2) softmax_forward10_b128(bf16* out, const bf16* inp, int N, int V) {
    softmax_row<128, 50>(out, inp, V);
}
extern "C" __global__ void __launch_bounds__(256, 2) softmax_forward10_b256(bf16* out, const bf16* inp, int N, int V) {
    softmax_row<256, 25>(out, inp, V);
}
extern "C" __global__ void __launch_bounds__(512, 1) softmax_forward10_b512(bf16* out, const bf16* inp, int N, int V) {
    softmax_row<512, 13>(out, inp, V);
}
