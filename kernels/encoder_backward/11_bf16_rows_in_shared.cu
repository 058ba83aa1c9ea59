/*
title = "bf16, the requests in the order they are needed: the ids, then the dwte rows into shared memory during the scan, then dout"
builds_on = 8
precision = "bf16"
changed = "Version 8's one pass with its requests reordered and its dwte rows brought closer. Version 8 asks for its dout chunks first, then, once its own ids are in, asks L2 for its tokens' dwte rows (bulk prefetches) and loads them after the scan: two batches of four chunks a thread, each batch also re-reading the group's first dout row, then dwpe's chunk, dependent round trips through an L2 busy with 13 MB of writes. Here the scan's ids come into shared memory first (version 9's bulk copy); once the block's own ids are in the table its threads issue one bulk copy (sm_90's TMA unit) per position of the first eight b, and per dwpe row, of the block's chunks of that row, into a tile in shared memory laid out like the block's units (row-block b, the column of the thread that owns the unit), all completing on one mbarrier; the dout chunks are loaded into registers only after the plan. A position alone with its token then adds its own dout chunk to its dwte chunk from the tile and stores: no other load. A leader of a group of k > 1 loads the group's rows as version 8 does. The sums and their order are version 8's: so are the bits."
why = """
Version 8's phase stamps: its own ids wait in DRAM's queues behind the dout every block asked for
at once, and its dwte updates after the scan take longer than a stream of their bytes would;
ncu's samples of version 9 put half of the warps' time in those updates, waiting on loads. So:
ask for what the critical path needs first (the ids, then the dwte rows of the block's tokens as
soon as they are known), let DRAM stream the rows into shared memory during the scan, where no
load waits on them afterwards, and ask for dout, needed only by the updates, last. A warp is never
stuck issuing loads before the scan, because the rows go through the TMA unit. Shared memory: the
tile (9 row-blocks x UB units of 16 bytes: 54 KB at block size 384), the ids (32 KB when
N <= 8192) and version 8's 14.6 KB: two blocks an SM at 384 threads.

It is a few percent faster than version 8, well short of the prediction: the median block ends
earlier, but the timing waits for the slowest block, and the blocks' scans of the same ids end far
apart. Even with the scan free, the ids' round trip and then the rows', both before the first dwte
store, are this design's floor. (A scan split across a cluster of four blocks was tried after and
not kept: the clusters did not fit one wave.)

B > 8 (the trainer's B = 16 and 32): the tile holds the first eight b; later groups are version
8's. N > 8192: the ids are scanned from L2, as in version 9. Before sm_90 (and on the CPU
emulator) each thread copies its own column of the tile.

The prediction, the phase stamps and the experiments: results/notes/encoder_backward.md.
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

[[emulate]]
when = "V * C <= 1000000"
runs = ["bs=128 seed=0 PRIORITY", "bs=384 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600, V = 50257 }]
runs = ["bs=384 seed=1 SHUFFLE"]
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
