/*
title = "bf16, the requests in the order they are needed: the ids, then the dwte rows into shared memory during the scan, then dout"
precision = "bf16"
changed = "Version 8's one pass with its requests reordered and its dwte rows brought closer. Version 8 asks for its dout chunks first, then, once its own ids are in, asks L2 for its tokens' dwte rows (bulk prefetches) and loads them after the scan: two batches of four chunks a thread, each batch also re-reading the group's first dout row, then dwpe's chunk, dependent round trips through an L2 busy with 13 MB of writes. Here the scan's ids come into shared memory first (version 9's bulk copy); once the block's own ids are in the table its threads issue one bulk copy (sm_90's TMA unit) per position of the first eight b, and per dwpe row, of the block's chunks of that row, into a tile in shared memory laid out like the block's units (row-block b, the column of the thread that owns the unit), all completing on one mbarrier; the dout chunks are loaded into registers only after the plan. A position alone with its token then adds its own dout chunk to its dwte chunk from the tile and stores: no other load. A leader of a group of k > 1 loads the group's rows as version 8 does. The sums and their order are version 8's: so are the bits."
why = """
Version 8's phase stamps (its header): own ids in and inserted at 6.8 us, scan done at 10.9,
updates done at 18.0, end 18.7 (medians over blocks, from the first block's start): its own ids
wait ~5 us in DRAM's queues behind the 12.6 MB of dout every block asked for at once, and the
13 MB of updates take ~6.7 us after the scan, where a stream of 13 MB of writes takes ~4.5 at the
copy's rate; ncu's samples of version 9 put half of the warps' time in those updates, waiting on
loads. So: ask for what the critical path needs first (the ids: 32 KB, then the dwte rows of the
block's tokens, as soon as they are known), let DRAM stream the rows during the scan into shared
memory, where no load waits on them afterwards, and ask for dout, needed only by the updates,
last. A warp is never stuck issuing loads before the scan (version 8's own experiment with dout
loaded before the scan showed that cost), because the rows go through the TMA unit. Shared
memory: the tile (9 row-blocks x UB units of 16 bytes: 54 KB at block size 384), the ids (32 KB
when N <= 8192) and version 8's 14.6 KB: two blocks an SM at 384 threads (206 KB of 228).

Prediction: scan done at ~8 us, the rows landed with it, then dout and the stores: ~14 us of
kernel, ~22 us timed as the bench times (0.9x the copy).

Measured on the H100 (2026-11-25, results/h100-encoder-backward-11-orders-2026-11-25.txt;
experiment copies timed beside version 8 by the workbench's method, L2 flushed, three rounds,
block 384): version 8 26.8, 26.5 and 26.5 us; this version
25.6, 25.6 and 25.4 us, against a copy of the same bytes at 19.4-19.9 us (0.76-0.77x). Its form
with the dout chunks loaded at the start as in version 8 (the ids and the rows as here): 25.8,
25.6 and 25.6 us; with them loaded once the own ids are in, before the scan: 28.4, 28.5 and 28.4
(warps stuck issuing). bench encoder_backward, twice, with that first form: 25.6 and 25.6 us
against the copy's 20.1 and 20.0 (0.79x and 0.78x), version 8 26.5 and 26.6. So 3-4% faster
than version 8, well short of the prediction. The phase stamps say why (three launches, medians
over blocks [slowest], us): table cleared 1.2 (version 8: 1.6); own ids in 4.2 [5.5-6.0]
(version 8: 6.3 [8.5]); scan done 8.0 [13.0-13.5] (10.3 [13.5-14.1]); rows landed 9.8-10.0 [14.1-
14.5]; updates done 14.5 [17.4-18.2] (15.5-16.4 [18.4-18.7]); end 14.8 [17.7-18.5] (16.5-17.4
[19.0-19.4]). The median block ends ~2 us earlier than version 8's, and the stamps bear out the
reordering (the ids are in 2 us earlier, the scan done 2 us earlier), but the timing waits for
the slowest block, and the blocks spread: with every block's ids in shared memory by 3.0-7.8 us,
the scans of the same 8192 ids end anywhere from 5.3 to 13.5 us, and the slowest blocks' rows
land last. The updates (dout loads and 13 MB of
stores) still take ~4.5 us after the rows land. Even with the scan free, ~0.87x: the ids' round
trip, then the rows', both before the first dwte store, is this design's floor.

Tried after (2026-11-25, not kept): the scan split across a cluster of four blocks (sm_90's
__cluster_dims__ and distributed shared memory: each block's tokens set its rank's bit in a
filter every block of the cluster holds, each block scans a quarter of the ids and probes the
tables the filter names, remotely). On the H100 the clusters of four blocks of 206 KB of shared
memory were placed on 124 SMs only (clusters must fit within a GPC), so the 256 blocks took two
waves, the last starting at 16 us: 40.5 us timed, three rounds, against this version's 25.7
(results/h100-encoder-backward-cluster-2026-11-25.txt).
Nor did the split make the scan shorter: in the first wave (the default sizes give every rank
the same slice, so the layouts agreed there) a block took 4.7 us from its ids' arrival to the end
of the scan (medians over blocks), against 3.4 us for this version's whole scan: the remote
probes and the cluster's barrier cost more than the three quarters of the filter tests they
saved. (That form also failed the check at sizes where the ranks' slices of the ids differ in
size: the tables then sat at different offsets in each block, and a remote probe assumes one
layout.) Not worth a smaller cluster.

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
