/*
title = "bf16, version 8 with the dwte rows it updates copied into shared memory while it scans: after the scan the updates only store"
precision = "bf16"
changed = "Version 8's one pass, with its dwte rows brought closer. Version 8 asks L2 for the block's chunks of its tokens' dwte rows during the scan (bulk prefetches) and loads them after it: two batches of four chunks a thread, each batch also re-reading the group's first dout row, then dwpe's chunk, three dependent round trips through an L2 busy with 13 MB of writes. Here, once the block's own ids are in, its threads issue one bulk copy (sm_90's TMA unit) per position of the first eight b and per dwpe row, of the block's chunks of that row, into a tile in shared memory laid out like the block's units (row-block b, the column of the thread that owns the unit), all completing on one mbarrier; the scan's ids come into shared memory first, as in version 9, and the dout chunks into registers at the start, as in version 8. After the scan a position alone with its token adds its own dout chunk, still in registers, to its dwte chunk from the tile and stores: no load at all. A leader of a group of k > 1 loads the group's rows as version 8 does. The sums and their order are version 8's: so are the bits."
why = """
Version 8's phase stamps (its header): ids in and inserted at 6.8 us, scan done at 10.9, lists
sorted 11.3, updates done at 18.0, end 18.7 (medians over blocks, from the first block's start).
So the 13 MB of updates take ~6.7 us after the scan, where a write stream of 13 MB takes ~4.5 at
the copy's rate; the ncu samples of version 9 put half of the warps' time in those updates,
waiting on loads. And version 9 measured the scan from shared memory ending ~2 us earlier than
version 8's scan from L2.

Both changes together: the ids by bulk copy into shared memory at the start (version 9's), dout
into registers as in version 8 (version 9's dout tile cost the same 48 KB this version spends on
dwte, and did not make the kernel faster), and the dwte and dwpe chunks into the tile by bulk
copies issued as soon as the own tokens are in the table, so they stream from DRAM during the
scan, where version 8's prefetches did the same but still needed the loads after it. Shared
memory: the tile (9 row-blocks x UB units of 16 bytes: 54 KB at block size 384), the ids (32 KB
when N <= 8192) and version 8's 14.6 KB: two blocks an SM at 384 threads (206 KB of 228).

Prediction: scan done at ~9 us (version 9), then the stores: ~14 us of kernel and ~22 us timed as
the bench times (0.93x the copy), against version 8's 26.5-26.8 us.

B > 8 (the trainer's B = 16 and 32): the tile holds the first eight b; later groups are version
8's (dwte prefetched one group ahead, loaded after). N > 8192: the ids are scanned from L2 (one
bulk prefetch at the start), as in version 9. Before sm_90 (and on the CPU emulator) each thread
copies its own column of the tile.
"""
block_sizes = [128, 256, 384]
preconditions = ["C % 8 == 0", "B <= 256"]  # 16-byte units; a block's positions must fit its 512-position table

[derived]
CU = "C // 8"                                         # units a time step has: 8 channels
UB = "min(block_size, CU * max(1, 512 // B - 1))"     # units a block owns: at most 512 positions
PB = "B * min(T, (UB - 1) // CU + 2)"                 # the positions those units touch, at most
HS = "2 ** (ilog2(2 * PB - 1) + 1)"                   # hash slots: a power of two >= 2 * PB
IDS = "1 if N <= 8192 else 0"                         # the ids copied into shared memory (32 KB at most)
# the tile (9 x UB units of 16 bytes: 8 row-blocks of dwte chunks and dwpe's), 10 mbarriers (80
# bytes), the ids, then version 8's layout: partial sums of long groups, the table, position
# lists and the filter.
shared_bytes = "16 * (9 * UB + 5 + IDS * (N // 4)) + 8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward11"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)", "IDS"]
*/
#include "bf16.cuh"                        // bf16, Pack8
#include "encoder_backward_fast.cuh"       // the one-pass kernel (ROWS: the tile of dwte and dwpe chunks)
#include "encoder_backward_bf16_rows.cuh"  // Row<bf16, 8>: the header's rows at bf16

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward11(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C, int V,
                   int UB, int PB, int bits, int ids_in_smem) {
    extern __shared__ float4 shared4[];  // the tile, the barriers, the ids, then encoder_backward_fast.cuh's layout
    ebfast::encoder_backward_fast<8, 8, bf16, ebfast::ROWS>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB,
                                                            bits, ids_in_smem != 0);
}
