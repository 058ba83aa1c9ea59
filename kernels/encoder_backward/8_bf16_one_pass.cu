/*
title = "bf16, one pass over dout: each block learns which of its tokens repeat from one scan of the ids; the rest need no coordination"
builds_on = 6
precision = "bf16"
changed = "Version 6 partitions the destinations (block g owns the tokens v % G == g: it reads all ids and sorts its positions before its first dout load, and dwpe's blocks read dout a second time). This version partitions dout itself: a thread owns (t, 8 channels) and walks b, reading each dout chunk once; it sums dwpe's B rows in registers and adds each row to its token's dwte row itself, in fp32, rounding once. What makes that safe without atomics: each block scans all the ids once against a hash table of its own tokens in shared memory, so every position knows how many positions in the batch hold its token. A token held once (85% of positions at the default sizes) is updated by its position's thread directly; a repeated one only by its leader, which sums the group's rows in ascending position order. One launch, no scratch, no global atomics, deterministic; the dwte rows to be updated are prefetched to L2 (sm_90 bulk prefetch) while the block scans."
why = """
Version 6 starts every token block with a walk over all the ids (L2 round trips and barriers),
then compaction, a counting sort and a plan, all before its first dout load, so DRAM idles at the
start; then its dwpe blocks read dout again. Here what a thread must read does not depend on the
scan, so it is requested first: the block's 32 token ids and the thread's B dout chunks.

The block owns 384 consecutive units (t, 8 channels): 4 time steps x 96 chunks, so 32 positions.
It puts their tokens in a hash table in shared memory and a 4096-bit filter, asks L2 for those
tokens' dwte rows (cp.async.bulk.prefetch, sm_90) and scans all N ids from L2: an id that is none
of the block's tokens fails the filter with a shared load and a few integer operations, no branch;
a hit counts the position against its token and takes the minimum of a bijective hash of the
position. After two barriers every position knows k, how many positions in the batch hold its
token, and its leader (the smallest hash, so frequent tokens do not crowd the first blocks).

Then each thread adds its dout chunks into dwpe's sum (in order of b) and, for a position with
k = 1 (85% of them at the default sizes), loads the dwte chunk (an L2 hit by now), adds in fp32,
rounds once and stores; with k > 1 only the leader's thread does it, summing the group's rows in
ascending position order. Tokens held by more than 8 positions are summed after the block's own
work, a warp per (32 chunks, one of 8 fixed ranges of positions), the partials added in order.
Every dwte and dwpe chunk has one writer: no atomics, every row summed in fp32 and rounded once
(family.toml: bf16 atomics fail the tolerance). The order of every addition
(kernels/encoder_backward/encoder_backward_fast.cuh states it) is set by the data alone. The header
is written for any element type: tests/test_encoder_backward.py builds an fp32 twin to check
the formula bit for bit. Widths not a multiple of 8 take one channel a unit.

The byte counts, the prediction, the phase stamps and the experiments:
results/notes/encoder_backward.md.
"""
block_sizes = [128, 256, 384]
preconditions = ["B <= 256"]  # a block's positions (B x its time steps) must fit its 512-position table

[derived]
CU = "C // 8 if C % 8 == 0 else C"                    # units a time step has: 8 channels, or 1
UB = "min(block_size, CU * max(1, 512 // B - 1))"     # units a block owns: at most 512 positions
PB = "B * min(T, (UB - 1) // CU + 2)"                 # the positions those units touch, at most
HS = "2 ** (ilog2(2 * PB - 1) + 1)"                   # hash slots: a power of two >= 2 * PB
# partial sums of long groups (max(1, warps / 8) x 8 slices x 256 floats), then the table (key,
# count, lead, 8 positions a slot), 2 x PB + 1 ints of position lists and a 4096-bit filter.
shared_bytes = "8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward8_pack8"
when = "C % 8 == 0"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)"]

[[launch]]
kernel = "encoder_backward8_scalar"
when = "C % 8 != 0"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)"]

[[emulate]]
when = "V * C <= 1000000"
runs = ["bs=128 seed=0 PRIORITY", "bs=384 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600, V = 50257 }]
runs = ["bs=384 seed=1 SHUFFLE"]
*/
#include "bf16.cuh"                   // bf16, Pack8 (eight bf16 in 16 bytes) with load8/store8, to_float/to_bf16
#include "encoder_backward_fast.cuh"  // the one-pass kernel, its table, scan and fixed-order sums
#include "encoder_backward_bf16_rows.cuh"  // Row<bf16, 8> and Row<bf16, 1>: the header's rows at bf16

constexpr int VEC_MAX = 8;  // the widest chunk (a Pack8): the header's shared_bytes relies on it

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward8_pack8(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C,
                        int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];  // the layout in encoder_backward_fast.cuh
    ebfast::encoder_backward_fast<8, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward8_scalar(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C,
                         int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];  // the layout in encoder_backward_fast.cuh
    ebfast::encoder_backward_fast<1, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}
