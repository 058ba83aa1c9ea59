/*
title = "bf16, version 11 with the scan shared by a cluster of four blocks: each reads a quarter of the ids"
precision = "bf16"
changed = "Version 11 with its scan split four ways (sm_90's thread block clusters and distributed shared memory). Every block of version 11 reads all N ids and tests each against a filter of its own ~40 tokens: 8192 tests a block, which its phase stamps put at 2.6-7 us, the widest spread of any phase. Here four blocks form a cluster (__cluster_dims__(4)); each sets, for each of its tokens, its rank's bit in a filter of four bits per filter bit held by every block of the cluster (remote atomicOr), so after the cluster's barrier every block holds the cluster's filter and knows whose tables an id may be in. Block r then copies and scans only the r-th quarter of the ids, and counts an id that passes in the tables of the blocks its four bits name, through distributed shared memory (the same atomics as before: a count, a minimum, a list slot). Another cluster barrier, and every count is final. The rest is version 11's: the same sums in the same order, so the same bits as version 8."
why = """
Version 11's stamps: ids in at 4.2 us (median over blocks), scan done at 8.0, with the slowest
blocks' scans ending at 13.0-13.5; the kernel's end follows the slowest blocks (17.7-18.5).
Splitting the scan four ways cuts each block's tests from 8192 to 2048 and its ids' copy from 32
KB to 8 KB; a test that passes costs a probe in another block's table (~40 tokens a block, 160 a
cluster, in 4096 filter bits: ~4% of ids pass, ~80 remote probes a block). Two cluster barriers
replace two block barriers; a cluster waits for its slowest block there, but the slowest block's
work is what the timing waits for anyway.

Prediction: scan done at ~5.5-6 us (median), the slowest by ~8; rows landed and dout requested
with it; end ~16 us for the slowest blocks: ~23 us timed (0.87x the copy), against version 11's
25.4-25.6.

The grid is rounded up to a multiple of four blocks; a block past the last unit owns no
position but still scans its quarter for its cluster. Before sm_90 (and on the CPU emulator)
there are no clusters: each block scans all the ids, as version 11 does.
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
# bytes), the ids (a quarter of them suffice on sm_90; all where there are no clusters), the
# cluster's filter (2 KB), then version 8's layout: partial sums of long groups, the table,
# position lists and the filter.
shared_bytes = "16 * (9 * UB + 5 + IDS * (N // 4) + 128) + 8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward12"
grid = "4 * cdiv(cdiv(T * CU, UB), 4)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)", "IDS"]
*/
#include "bf16.cuh"                        // bf16, Pack8
#include "encoder_backward_fast.cuh"       // the one-pass kernel (CLUSTER_ROWS: version 11's, the scan split)
#include "encoder_backward_bf16_rows.cuh"  // Row<bf16, 8>: the header's rows at bf16

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define EB12_CLUSTER __cluster_dims__(ebfast::CLUSTER, 1, 1)
#else
#define EB12_CLUSTER
#endif

extern "C" __global__ void __launch_bounds__(384, 2) EB12_CLUSTER
encoder_backward12(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C, int V,
                   int UB, int PB, int bits, int ids_in_smem) {
    extern __shared__ float4 shared4[];  // the tile, the barriers, the ids, the cluster's filter, then the table
    ebfast::encoder_backward_fast<8, 8, bf16, ebfast::CLUSTER_ROWS>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB,
                                                                    PB, bits, ids_in_smem != 0);
}
