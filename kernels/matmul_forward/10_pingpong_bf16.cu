/*
title = "bf16: version 9's GEMM in ping-pong (a warpgroup a 128 x 128 tile, one's epilogue under the other's products)"
builds_on = 9
precision = "bf16"
changed = """
Version 9's two consumer warpgroups share each 128 x 192 tile and run its epilogue at once. Here
each takes whole 128 x 128 tiles, the block's tiles in turn (kernels/common/gemm_tma.cuh's
gemm_tma_pingpong, as matmul_forward_gelu 12 without the GELU): one warpgroup's bias, conversion
and copy-engine stores run under the other's products. Tiles go in groups of 16 row blocks, each
group column block by column block, so the lm head's 77 MB weight is read from memory once a group
instead of once a row block.
"""
why = """
Version 9 lost to cuBLASLt (version 8) at every B = 16 shape on an H200: qkv 95.9 us against 92.2,
attproj 39.1 / 34.3, fcproj 106.2 / 104.7, and the lm head 2407 / 1845, where its tile order (a row
block's 262 column blocks, then the next) streams the whole weight, larger than L2, from memory
for each of the 128 row blocks (results/h200-session16-2026-12-02, call 2). This version measures
the ping-pong order and the grouped tiles against it.
Measured (call 4, B = 16, against 8 in the same call): the lm head 1924 us against 1910 (the
grouped tiles took back 500 us), qkv 97.0 / 92.6, attproj 39.3 / 34.8, fcproj 116.1 / 105.5. Still
slower than cuBLASLt everywhere: not promoted. Where the GELU's epilogue is heavy the ping-pong
wins (matmul_forward_gelu 12); with only the bias to add, cuBLASLt's main loop is the faster.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma and setmaxnreg: a Hopper

[[launch]]
kernel = "matmul_forward10"
grid = "min(cdiv(N, 128) * cdiv(OC, 128), SMS)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 128, 64", "tma:out, N, OC, 128, 64", "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma_pingpong: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 128;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight
constexpr int GROUP = 16;    // row blocks a group of tiles

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_forward10(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const bf16* bias, int M, int N,
                 int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_pingpong<TILE_N, STAGES, GROUP, false>(map_inp, map_weight, nullptr, map_out, bias, M, N, K);
#else
    __trap();  // TMA, wgmma and setmaxnreg need sm_90a (a Hopper GPU): see the header
#endif
}
