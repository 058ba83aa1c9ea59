/*
title = "bf16: our own Hopper GEMM (TMA, wgmma, a producer thread), the bias added before the copy engine's stores"
builds_on = 8
precision = "bf16"
changed = """
No library: one persistent kernel (kernels/common/gemm_tma.cuh). Its producer thread streams
128 x 64 tiles of inp and 192 x 64 tiles of weight through four shared-memory stages by TMA; two
consumer warpgroups multiply each 128 x 192 output tile with 64 x 192 x 16 wgmma, add the bias to
their fp32 accumulators, round them to bf16 into shared memory as 64 x 64 boxes in the TMA's
128-byte swizzle, and one thread of each hands the boxes to the copy engine (TMA stores), which
writes them out while the warpgroup goes back to its products.
"""
why = """
matmul_forward_gelu's own GEMM (the same main loop) ran without an epilogue at 105-111 us at the
fc layer's B = 16 shape on an H200, where cuBLASLt's plain GEMM of that shape took 119 us in the
same rounds (results/h200-session16-2026-12-02, call 1). With its stores left to the copy engine,
the epilogue costs the warpgroups a barrier and the conversion: this version measures whether the
whole kernel keeps that lead over version 8's tuned cuBLASLt at the trainer's shapes.
It does not (calls 2 and 3, B = 16): qkv 95.9-97.1 us against 8's 92.2-95.0, attproj 39.1 / 34.3,
fcproj 106.2-107.8 / 104.7-104.9, the lm head 2407-2450 / 1845-1958; promoted with
matmul_forward_gelu 10, the trainer's step took 1.1 ms longer. Not promoted.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA and wgmma: a Hopper

[[launch]]
kernel = "matmul_forward9"
grid = "min(cdiv(N, 128) * cdiv(OC, 192), SMS)"
block = 384
shared = "1024 + 4 * (128 + 192) * 128 + 1024 + 2 * 192 * 128"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 192, 64", "tma:out, N, OC, 64, 64", "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 192;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_forward9(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const bf16* bias, int M, int N,
                int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma<TILE_N, STAGES, 1, false>(map_inp, map_weight, nullptr, map_out, bias, M, N, K);
#else
    __trap();  // TMA and wgmma need sm_90a (a Hopper GPU): see the header
#endif
}
