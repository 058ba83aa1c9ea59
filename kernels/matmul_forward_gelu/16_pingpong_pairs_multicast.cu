/*
title = "bf16: version 14 in clusters of two blocks that share each weight tile by TMA multicast (ping-pong, pairs)"
builds_on = 14
precision = "bf16"
changed = """
Version 14's kernel (ping-pong: a consumer warpgroup a 128 x 128 tile, the bias loaded before the
products) run in clusters of two blocks (__cluster_dims__(2, 1, 1)) that take vertically adjacent
tiles, rows 256 i .. 256 i + 255 of one column block, so both need the same 128 x 64 tiles of
weight. Each block's producer loads its own 128 x 64 tile of inp and one half (64 rows) of the
weight's, and the TMA writes that half into both blocks' shared memory (gemm_wgmma.cuh's
CLUSTER = 2, now also with the ping-pong order and the groups: GROUP = 8 pairs, version 14's 16 row
blocks). A stage is refilled once both blocks' warpgroups have released it.
"""
why = """
At the rate the plain GEMMs of this shape reach (~740 TFLOP/s), a block of 128 x 128 tiles takes
32 KB out of L2 for every 2.1 MFLOP: about 11 TB/s over 132 SMs. Version 14's profile
(results/h200-session18-2026-12-02, call B) has a quarter of its main-loop samples waiting for a
stage's bytes, and cuBLASLt's kernels at these shapes run in pairs of blocks sharing a tile. In
pairs a block reads 16 + 8 KB a k-step: a quarter less. The prediction: if L2's bandwidth is
what starves version 14's ring, pairs close part of its gap to the plain GEMM.
Measured on an H100 (results/h100-session20-2026-12-06). The first cut ran 1.7x slower than 14
(514 against 300 us at B = 32, call 1); Nsight Compute (call 2) put a fifth of its warps' stalls
on MEMBAR: each consumer warp's arrive on the other block's barrier was a .release.cluster,
which first makes the warp's earlier writes visible cluster-wide. At the block's scope
(gemm_wgmma.cuh's mbar_arrive_in, as CUTLASS arrives) it runs 308.3 us at B = 32 and 165.4 at
B = 16 against 14's 302.4 and 158.7 in the same call (call 3); 89.5 against 87.1 at the family's
B = 8 (call 4's bench). So the prediction fails: a quarter less L2 traffic buys nothing here;
whatever starves version 14's ring, it is not L2's bandwidth. The same fix made version 8 faster
than 7, where it had been slower. Not promoted; kept as the measured step. Memcheck, racecheck,
initcheck and synccheck clean (calls 1 and 3).
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma, setmaxnreg and clusters: a Hopper

[[launch]]
kernel = "matmul_forward_gelu16"
grid = "2 * min(cdiv(cdiv(N, 128), 2) * cdiv(OC, 128), SMS // 2)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 64, 64", "tma:out, N, OC, 128, 64", "tma:pre, N, OC, 128, 64",
        "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma_pingpong: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 128;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight
constexpr int GROUP = 8;     // pairs of row blocks a group of tiles (16 row blocks)

extern "C" __global__ void GEMM_PAIRS __launch_bounds__(384, 1)
matmul_forward_gelu16(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const TmaMap* map_pre,
                      const bf16* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_pingpong<TILE_N, STAGES, GROUP, true, true, 2>(map_inp, map_weight, map_out, map_pre, bias, M, N, K);
#else
    __trap();  // TMA, wgmma, setmaxnreg and clusters need sm_90a (a Hopper GPU): see the header
#endif
}
