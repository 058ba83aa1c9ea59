/*
title = "bf16, version 8 with its dout rows moved by the TMA unit into shared memory, after the ids (slower)"
precision = "bf16"
changed = "Version 8's one pass with the order of its first requests changed, as its measured phases asked: every block's first thread asks L2 for all the token ids (one bulk prefetch) before anything else; the dout rows of the block's first eight b are requested only once the block's own ids are in, and not as loads: one bulk copy (cp.async.bulk, sm_90's TMA unit) per b into a 48 KB tile in shared memory, completing on an mbarrier. No warp waits to issue them, so the block goes straight on to its scan while they stream; the threads read their chunks from the tile when the scan is done."
why = """
Version 8's header records where its 18-19 us of kernel go, phase by phase: its own ids arrive
only after ~5 us because they queue in DRAM behind the 12.6 MB of dout every block asked for at
once; the scan of all ids takes ~4 us more; the updates come after. Two of its experiments frame
this one: asking for the ids first and the dout rows only after the scan put the ids in at 3.2 us
but left DRAM idle during the scan (25.9 us against 26.6); asking for the dout rows as loads right
after the ids were in was worse (28.7 us), because a warp cannot go on to the scan until all its
loads are issued, and 12.6 MB of loads are accepted only as fast as DRAM returns earlier ones.

Here the requests go in that order and none of them holds a warp:
* thread 0 of every block asks L2 for all of inp at the start (one bulk prefetch: the same 32 KB
  for every block, fetched once), then each thread loads its own id, as in version 8;
* once the ids are in the table (the barrier after the inserts), thread 0 issues one bulk copy
  per b < 8 of the block's units of dout (they are one contiguous range per b: 384 units of 16
  bytes, 6 KB, at block size 384) into a tile in shared memory, each completing on its own
  mbarrier with the bytes it expects; the dwte rows keep version 8's L2 prefetches;
* the block scans while the copies stream, then every thread waits on the eight barriers and
  reads its eight chunks from the tile (its own column: no bank conflicts) into the registers
  version 8 loaded them into, and the rest is version 8's, unchanged (the same sums in the same
  order: the bits are version 8's).
Batches beyond 8 (B > 8) load their later groups as version 8 does. The tile is 8 x UB x 16 bytes
(48 KB at block size 384) on top of version 8's 14.6 KB: two blocks an SM still fit (128 KB).
Without sm_90 (and on the CPU emulator) each thread copies its own chunks into the tile instead.

Prediction: own ids in at ~3 us, scan done at ~7 us with dout already in the tile and the dwte
rows in L2, the updates then write 13 MB: ~15 us of kernel, ~22 us timed as the bench times
(0.9x the copy's 20 us).

Measured on the H100 (2026-11-24, bench encoder_backward twice): 28.4 and 28.6 us against the
copy's 20.2 and 19.9 us (0.70-0.71x); version 8 26.9 and 26.6 us in the same runs. Slower, and
the phase stamps (version 8's method, same call) say where the prediction failed: the own ids
are in at 4.1-4.2 us (version 8: 7.8), as intended, but the scan then takes 6-7 us instead of 4,
so it ends at 10.5-11.1 us, no earlier than version 8's 11.6; the updates end at 18.2-18.8 us
(version 8 17.4) and the kernel at 19.1-19.6 (18.3). The scan's ids come from L2 in both, so
what slows it while the bulk copies stream is not DRAM; not yet measured (ncu of the two scans:
L2 throughput and the scan's stall reasons would say). The lesson stands as measured: moving a
load off the warps' issue path does not help if the phase it overlaps slows by as much.
"""
block_sizes = [128, 256, 384]
preconditions = ["C % 8 == 0", "B <= 256"]  # 16-byte units; a block's positions must fit its 512-position table

[derived]
CU = "C // 8"                                         # units a time step has: 8 channels
UB = "min(block_size, CU * max(1, 512 // B - 1))"     # units a block owns: at most 512 positions
PB = "B * min(T, (UB - 1) // CU + 2)"                 # the positions those units touch, at most
HS = "2 ** (ilog2(2 * PB - 1) + 1)"                   # hash slots: a power of two >= 2 * PB
# the dout tile (8 x UB units of 16 bytes) and 8 mbarriers (64 bytes), then version 8's layout:
# partial sums of long groups, the table, position lists and the filter.
shared_bytes = "16 * (8 * UB + 4) + 8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward9"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)"]
*/
#include "bf16.cuh"                        // bf16, Pack8
#include "encoder_backward_fast.cuh"       // the one-pass kernel (BULK: the tile and its barriers)
#include "encoder_backward_bf16_rows.cuh"  // Row<bf16, 8>: the header's rows at bf16

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward9(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C, int V,
                  int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];  // the tile, the barriers, then encoder_backward_fast.cuh's layout
    ebfast::encoder_backward_fast<8, 8, bf16, true>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}
