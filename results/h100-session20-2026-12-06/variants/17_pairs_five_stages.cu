/*
title = "device-only variant: version 16 with five stages"
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
32 KB out of L2 for every 2.1 MFLOP: about 11 TB/s over 132 SMs, more than L2 serves. Version 14's
profile (results/h200-session18-2026-12-02, call B) has a quarter of its main-loop samples waiting
for a stage's bytes, and cuBLASLt's kernels at these shapes run in pairs of blocks sharing a
tile. In pairs a block reads 16 + 8 KB a k-step: a quarter less. Version 8 tried pairs on the
cooperative kernel (both warpgroups on one tile, its epilogue exposed) at ~370 TFLOP/s, where L2
was not the limit, and lost to the coupling; at version 14's ~540 the traffic is the limit.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma, setmaxnreg and clusters: a Hopper

[[launch]]
kernel = "matmul_forward_gelu17"
grid = "2 * min(cdiv(cdiv(N, 128), 2) * cdiv(OC, 128), SMS // 2)"
block = 384
shared = "1024 + 5 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 64, 64", "tma:out, N, OC, 128, 64", "tma:pre, N, OC, 128, 64",
        "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma_pingpong: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 128;  // a tile's columns (its rows: 128)
constexpr int STAGES = 5;    // k-steps of 64 in flight
constexpr int GROUP = 8;     // pairs of row blocks a group of tiles (16 row blocks)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAIRS __cluster_dims__(2, 1, 1)  // two blocks a cluster (Hopper; elsewhere the body is a trap)
#else
#define PAIRS
#endif

extern "C" __global__ void PAIRS __launch_bounds__(384, 1)
matmul_forward_gelu17(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const TmaMap* map_pre,
                      const bf16* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_pingpong<TILE_N, STAGES, GROUP, true, true, 2>(map_inp, map_weight, map_out, map_pre, bias, M, N, K);
#else
    __trap();  // TMA, wgmma, setmaxnreg and clusters need sm_90a (a Hopper GPU): see the header
#endif
}
