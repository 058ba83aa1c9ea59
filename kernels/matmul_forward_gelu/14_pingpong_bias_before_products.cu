/*
title = "bf16: version 12 with each tile's bias loaded before its products, not between its staging stores"
builds_on = 12
precision = "bf16"
changed = """
gemm_tma_pingpong's EARLY_BIAS: before a tile's main loop each thread loads the bias of its
columns (16 words of two bf16, gemm_tma.cuh's load_bias_pairs) into registers, and the epilogue adds
them from there (stage_with_bias_pairs). Version 12 loads a pair of bias values inside the loop
that stages the sums, one column pair after another. Everything else is version 12's.
"""
why = """
In version 12's epilogue each bias load sits between shared-memory stores written as volatile
asm with a memory clobber, so the compiler keeps each load after the stores before it: up to 32
global loads a tile, each waiting its own round trip while the tensor cores run only the other
warpgroup's products. Loaded before the products, the bias is in registers when the epilogue
starts; the main loop hides its latency.
Measured on an H200 (session 18): 143.2 us at B = 16 and 272.8 at B = 32 against version 12's
145.8 and 275.9 (call A); 143.7 / 271.3 against cuBLASLt's (version 5) 157.4 / 276.0 (call C).
Under Nsight Compute 165.3 us against 12's 169.1 (call B). Promoted with matmul_backward_dgelu 10:
the trainer's bf16 step took 27.66 ms at B = 16 against 27.85 with dgelu 10 alone (call A); with
both, 27.36 / 27.41 ms at B = 16 and 53.35 / 53.27 at B = 32 against PyTorch's 36.60 and 69.49
(call C). What its profile says (call B, callB/source-samples.txt): 71% of the warps' samples
fall in the main loop, a quarter of those waiting for a stage's bytes; 8% in the epilogue; 10%
in the turn waits, where a warpgroup that has finished its epilogue waits for its next tile. So
the epilogue does hide under the other warpgroup's products; the ring is what starves.
cuBLASLt's kernel at this shape (128 x 160 tiles, pairs sharing B) spends most of its samples
waiting for its wgmma to finish, and fewer waiting for bytes.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma and setmaxnreg: a Hopper

[[launch]]
kernel = "matmul_forward_gelu14"
grid = "min(cdiv(N, 128) * cdiv(OC, 128), SMS)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 128, 64", "tma:out, N, OC, 128, 64", "tma:pre, N, OC, 128, 64",
        "bias", "N", "OC", "C"]
*/
#include "gemm_tma.cuh"  // gemm_tma_pingpong: the main loop (gemm_wgmma.cuh) and the copy engine's epilogue

constexpr int TILE_N = 128;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight
constexpr int GROUP = 16;    // row blocks a group of tiles

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_forward_gelu14(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const TmaMap* map_pre,
                      const bf16* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_pingpong<TILE_N, STAGES, GROUP, true, true>(map_inp, map_weight, map_out, map_pre, bias, M, N, K);
#else
    __trap();  // TMA, wgmma and setmaxnreg need sm_90a (a Hopper GPU): see the header
#endif
}
