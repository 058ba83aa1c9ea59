/*
title = "bf16: version 10 with pre and gelu(pre) staged apart, three stages to make room"
builds_on = 10
precision = "bf16"
changed = """
Version 10 stages gelu(pre) where pre was, so it waits until the copy engine has read pre's boxes.
Here each output has its own staging area (48 KB a warpgroup instead of 24), and the ring holds
three stages instead of four to make room (223 KB in all).
"""
why = """
If the wait for pre's boxes to be read out is what version 10's warpgroups spend their epilogue
on, this removes it; the price is a shallower ring (alone, three stages ran ~4% slower than four at
B = 16 on an H200: results/h200-session16-2026-12-02, call 1). Measured to see which costs more.
The ring costs more: 158.7-160.7 us against version 10's 151.4-153.5 (calls 2-4).
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA and wgmma: a Hopper

[[launch]]
kernel = "matmul_forward_gelu11"
grid = "min(cdiv(N, 128) * cdiv(OC, 192), SMS)"
block = 384
shared = "1024 + 3 * (128 + 192) * 128 + 1024 + 2 * 2 * 192 * 128"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 192, 64", "tma:out, N, OC, 64, 64", "tma:pre, N, OC, 64, 64",
        "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 192;  // a tile's columns (its rows: 128)
constexpr int STAGES = 3;    // k-steps of 64 in flight
constexpr int BUFFERS = 2;   // pre and gelu(pre) each staged apart

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_forward_gelu11(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const TmaMap* map_pre,
                      const bf16* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma<TILE_N, STAGES, BUFFERS, true>(map_inp, map_weight, map_out, map_pre, bias, M, N, K);
#else
    __trap();  // TMA and wgmma need sm_90a (a Hopper GPU): see the header
#endif
}
