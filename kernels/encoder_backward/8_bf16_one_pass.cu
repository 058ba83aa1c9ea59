/*
title = "bf16, one pass over dout: each block learns which of its tokens repeat from one scan of the ids; the rest need no coordination"
precision = "bf16"
changed = "Version 6 partitions the destinations (block g owns the tokens v % G == g: it reads all ids and sorts its positions before its first dout load, and dwpe's blocks read dout a second time). This version partitions dout itself: a thread owns (t, 8 channels) and walks b, reading each dout chunk once; it sums dwpe's B rows in registers and adds each row to its token's dwte row itself, in fp32, rounding once. What makes that safe without atomics: each block scans all the ids once against a hash table of its own tokens in shared memory, so every position knows how many positions in the batch hold its token. A token held once (85% of positions at the default sizes) is updated by its position's thread directly; a repeated one only by its leader, which sums the group's rows in ascending position order. One launch, no scratch, no global atomics, deterministic; the dwte rows to be updated are prefetched to L2 (sm_90 bulk prefetch) while the block scans."
why = """
Version 6 (30.4 µs at B=8 T=1024 C=768 V=50257, uniform random tokens; a copy of the same 40.9
MB: 20.0 µs) starts every one of its 512 token blocks with a walk over all 8192 ids: 8 rounds,
each an L2 round trip and a barrier, then compaction, a counting sort and a plan, all before its
first dout load, so DRAM idles at the start; then the dwpe blocks read dout again.

Here what a thread must read does not depend on the scan, so it is requested first: the block's
32 token ids and the thread's B = 8 dout chunks (16-byte loads, 128 bytes) from DRAM, before
anything else. The block owns 384 consecutive units (t, 8 channels), i.e. 4 time steps x 96
chunks, so 32 positions; it puts their tokens in a hash table in shared memory (128 slots) and a
4096-bit filter, asks L2 (cp.async.bulk.prefetch, sm_90) for those tokens' dwte row ranges and
its dwpe rows, and scans all N ids from L2 (int4 loads, four in flight a thread: two round
trips). An id that is none of the block's 32 tokens, nearly all of them, fails the filter (a
shared load and a few integer operations, no branch; 1% pass by accident and are probed); a hit
counts the position against the token, keeps it (the first 8) and takes the minimum of
mix(position), a bijective hash. After two barriers every position knows k, the number of
positions in the whole batch that hold its token, and its leader (the smallest mix).

Then each thread adds its 8 dout chunks into dwpe's sum (in order of b), and for each of its
positions with k = 1 (85% of positions: (N-1)/V = 0.16, e^-0.16 = 0.85): load the dwte chunk (an
L2 hit by now), add the row in fp32, round once, store; with k > 1, only the leader's thread
does it, which sums the group's k rows in ascending position order (the others re-read: 633
rows, 1 MB, mostly from L2). Every dwte and dwpe chunk has exactly one writer in the grid, so
there are no atomics, and every row is summed in fp32 and rounded once (family.toml: bf16
atomics fail the tolerance).

Tokens held by more than 8 positions (none at these sizes, but frequent tokens in real text, and
V = 1 or 2) are summed after the block's own work by the block owning the leader's chunks: a
warp per (32 chunks, one of 8 fixed ranges of positions), the ranges' fp32 partial sums added in
order through shared memory. The leader is the smallest mix rather than the first position so
that frequent tokens, whose first positions crowd the start of every sequence, do not pile onto
the first blocks; still, all of one such token goes through one SM (or two), as in versions 5
and 6: a token holding a large share of a batch is a tail.

The order of every addition (kernels/common/encoder_backward_fast.cuh states it) is set by the
data alone: the bits are the same at every block size and on every run.

Bytes: dout read once (12.6 MB, plus the leaders' 1 MB of re-reads, mostly L2 hits), 7559
distinct dwte rows read and written (11.6 + 11.6 MB; the family's count takes all 8192, so it is
a little generous) plus 633 rows prefetched for non-leaders (1 MB, wasted), dwpe 1.6 + 1.6 MB:
~28 MB read and 13 MB written, where a copy of the family's 40.9 MB reads and writes 20.5 MB
each; reads are the cheaper, so the copy's time is within reach if DRAM stays busy. The scan
costs L2 and issue slots, not DRAM: 256 blocks x 32 KB = 8.4 MB of L2 reads and, a block, 8192
filter tests (~7 instructions each: ~1.6k warp instructions, ~0.5 µs of one SM's issue), while
the block's dout loads are in flight. (A hash probe per id, branching on every id, cost twice
the instructions.) Registers: 80 (launch bounds (384, 2); at 512 threads a block, 100, so 384 is
the largest block), so two 384-thread blocks an SM and the 256 blocks are one wave; 768 threads
x 128 bytes = 98 KB of dout in flight per SM at the start, and the dwte rows already on their
way to L2 through the bulk prefetches, which hold no registers (Little's law wants ~25-35 KB per
SM). What is left on a block's critical path: the own ids (a DRAM round trip), the scan (two L2
round trips and the probes), then L2 hits. Predicted: 19-21 µs at the default sizes (the goal is
21 µs; the copy takes 20.0 µs). What could cost more than predicted: the wave's blocks reach the
dwte phase together and wait on prefetches that DRAM serves in its own order; a profile would
show it as DRAM idle near the end.

The header is written for any element type: with fp32 rows (Row<float, 4>, 4 channels a unit) it
is a deterministic fp32 version, which tests/test_encoder_backward_fast.py builds to check the
formula bit for bit (bf16's one rounding hides most fp32 order differences); on the emulator it
also stays within the fp32 tolerance on a Zipf batch whose most frequent token holds 2129 of
8192 positions, where versions 1 and 7 (atomics in arbitrary order) exceed it.

Widths that are not a multiple of 8 take the same kernel with one channel a unit (no prefetch).
A block owns at most 512 positions (UB limits its units when C is tiny), so the table fits in
shared memory at every size with B <= 256.

Measured on the H100 (bench --all, three runs of 2026-11-24): 26.5-26.8 us against the copy's
19.9-20.4 us (0.74-0.77x): faster than version 6 (30.5-30.9 us) but well short of the prediction.
Where the time goes: each block's thread 0 wrote %globaltimer (32 ns steps) after every phase,
one launch after an L2 flush, three launches (an experiment copy of this header; the stamps'
barriers add ~0.5 us). Medians over the 256 blocks, the slowest in brackets, us from the first
block's start: table cleared 1.7 [1.9]; own ids in and inserted 6.8 [7.9]; scan done 10.9 [12.5];
lists sorted 11.3 [13.3]; dwpe summed and dwte updated 18.0 [19.7]; end 18.7 [20.3]. So the
prediction's error is the scan's chain: the block's own ids, though issued first, wait ~5 us in
DRAM's queues behind the 12.6 MB of dout that every block asked for at the same moment (and the
scan's ids, the same 32 KB fetched by whichever block asks first, wait there too); the scan then
takes ~4 us; only after it can a dwte row be written, and the 13 MB of writes follow in a burst.
Two reorderings, timed beside this version in one run: all of inp asked of L2 (one bulk
prefetch) before any dout load, and the dout loads moved after the scan: own ids in at 3.2 us,
scan done at 7.3, end at 17.0; 25.9 us against 26.6 (3%), because DRAM now idles during the scan.
The same plus dout asked of L2 at the start: 26.7 us. The dout loads issued once the own ids
are in, before the scan: 28.7 us, the worst, because a thread cannot go on to the scan until its
eight loads are issued, and 12.6 MB of loads are accepted only as fast as DRAM returns earlier
ones (the stamp after them reads 8-9 us). What these say a faster design needs: DRAM busy from
the first microsecond without warps stuck issuing loads (bulk copies of the block's dout rows
into shared memory, which no thread waits on until it uses them), and the dwte writes starting
while reads are still in flight (a barrier per b, so that a position's row is written as soon as
it has landed and the scan is done) instead of one 13 MB burst at the end. Estimated: ~16 us of
kernel, still ~0.9x the copy, because the ids' round trip before any dwte row can be written
stays. A count-table prototype (a memset, a kernel counting each token with atomics and ranking
its positions by the atomics' order, then the stream) ran 44 us at its first try, each thread
updating its rows one round trip after another: the extra launches are not the problem, the
shape is.
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
