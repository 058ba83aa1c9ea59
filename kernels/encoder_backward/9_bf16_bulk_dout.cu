/*
title = "bf16, version 8 with its requests moved off the warps: the ids and the first dout rows copied into shared memory by the TMA unit (no faster)"
builds_on = 8
precision = "bf16"
changed = "Version 8's one pass, with the order and the path of its first requests changed, as its measured phases asked. At the start, thread 0 copies all the token ids into shared memory with one bulk copy (cp.async.bulk, sm_90's TMA unit; batches up to 8192 positions, else it asks L2 for them); once the block's own ids are in the table, it copies the block's dout units for the first eight b into a 48 KB tile, one bulk copy per b, each completing on its own mbarrier. No warp waits to issue any of them: the block goes straight on to its scan (of the ids in shared memory, with no L2 round trips) while dout streams; the threads then read their chunks from the tile. Every sum is version 8's, in the same order: the bits are version 8's."
why = """
Version 8's phase stamps say where its time goes: its own ids arrive late because they queue in
DRAM behind the dout every block asked for at once, and the scan of all ids follows. Asking for
the ids first and dout after the scan left DRAM idle during the scan; asking for dout as loads once
the ids were in was worse, because a warp cannot go on to the scan until all its loads are issued.

So here no request holds a warp:
* thread 0 of every block starts a bulk copy (sm_90's TMA unit) of all of inp into shared memory
  before anything else, and each thread loads its own id as in version 8;
* once the own ids are in the table, thread 0 issues one bulk copy per b < 8 of the block's units
  of dout into a tile, each completing on its own mbarrier; the dwte rows keep version 8's L2
  prefetches;
* the block scans the ids from shared memory while the copies stream, then waits on the eight
  barriers and reads its chunks from the tile into the registers version 8 loaded them into; the
  rest is version 8's.
Batches beyond 8 load their later groups as version 8 does; batches over 8192 positions scan their
ids from L2. Without sm_90 (and on the CPU emulator) the block's threads make both copies.

It is no faster: the copies do take the ids and dout off the warps and the kernel ends a little
earlier, but the ids still queue behind other blocks' copies, and the scan is the filter's own
work, not L2 latency. The prediction, the stamps and the variants tried:
results/notes/encoder_backward.md.
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
IDS = "1 if N <= 8192 else 0"                         # the ids copied into shared memory (32 KB at most)
shared_bytes = "16 * (8 * UB + 5 + IDS * (N // 4)) + 8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward9"
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
#include "encoder_backward_fast.cuh"       // the one-pass kernel (BULK: the tile and its barriers)
#include "encoder_backward_bf16_rows.cuh"  // Row<bf16, 8>: the header's rows at bf16

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward9(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C, int V,
                  int UB, int PB, int bits, int ids_in_smem) {
    extern __shared__ float4 shared4[];  // the tile, the barriers, the ids, then encoder_backward_fast.cuh's layout
    ebfast::encoder_backward_fast<8, 8, bf16, ebfast::DOUT>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits,
                                                    ids_in_smem != 0);
}
