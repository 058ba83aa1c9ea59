/*
title = "bf16: version 7 with five stages, the epilogue staged 32 rows at a time to make room"
builds_on = 7
precision = "bf16"
changed = """
Version 7's ring holds four 40 KB stages and its epilogue stages a warpgroup's 64 rows (25.6 KB
each). Here each warpgroup stages 32 rows at a time (two passes, each output), and the 25.6 KB
freed holds a fifth stage: 200 KB in flight a block instead of 160.
"""
why = """
Version 7's consumers mostly wait on the stages' full barriers (session 15, call 7): a stage is
refilled only once both warpgroups have released it, one k-step after they used it, so about two
and a half stages of lead cover the TMA's round trip. cuBLASLt's kernel of this tile runs five.
Measured at B = 16 on an H200 (results/h200-session16-2026-12-02, calls 1, 3 and 4): 262-264 us
against version 7's 207-208: slower. The premise was wrong: the main loop alone ran at 105-111 us
with three, four or five stages alike (call 1's sweep), so the stages were never what version 7
waited on; its epilogue was (version 10), and staging it in two passes made it longer.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA and wgmma: a Hopper

[[launch]]
kernel = "matmul_forward_gelu9"
grid = "min(cdiv(N, 128) * cdiv(OC, 192), SMS)"
block = 384
shared = "1024 + 5 * (128 + 192) * 128 + 16 * 5 + 2 * 32 * 400"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 192, 64", "out", "pre", "bias", "N", "OC", "C"]
*/
#include "gelu_gemm.cuh"  // gelu_gemm: the main loop (gemm_wgmma.cuh) and the staged epilogue

constexpr int TILE_N = 192;  // a tile's columns (its rows: 128)
constexpr int STAGES = 5;    // k-steps of 64 in flight

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_forward_gelu9(const TmaMap* map_inp, const TmaMap* map_weight, bf16* out, bf16* pre, const bf16* bias, int M,
                     int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gelu_gemm<TILE_N, STAGES, 1, 32>(map_inp, map_weight, out, pre, bias, M, N, K);
#else
    __trap();  // TMA and wgmma need sm_90a (a Hopper GPU): see the header
#endif
}
