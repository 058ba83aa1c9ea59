/*
title = "bf16: version 10's epilogue under the other warpgroup's products (ping-pong: a warpgroup a tile)"
builds_on = 10
precision = "bf16"
changed = """
Version 10's two consumer warpgroups share each 128 x 192 tile, so both run its epilogue at once
while the tensor cores wait. Here each warpgroup takes whole 128 x 128 tiles, the block's tiles in
turn (kernels/common/gemm_tma.cuh's gemm_tma_pingpong): four wgmma of 64 x 128 x 16 a k-step on the
shared ring's stage, two row blocks of accumulators (128 floats a thread), and while it adds the
bias, converts, stages and hands its boxes (128 x 64) to the copy engine, the other warpgroup's
products run. The producer warpgroup gives registers back (setmaxnreg 40) so that each consumer
may hold 232. Tiles go in groups of 16 row blocks, each group column block by column block.
"""
why = """
Version 10's epilogue still cost ~43 us of its 151 at B = 16 on an H200, against ~108 for its main
loop alone (results/h200-session16-2026-12-02, calls 1 and 2): its GELU alone is 50 M hardware
tanh, ~1 us a tile an SM, and the tensor cores idle through all of it. A warpgroup's epilogue of a
128 x 128 tile (~1 us) is shorter than the other's main loop of one (~3.5 us at K = 768), so in
this order the tensor cores need not wait for it at all.
Measured at B = 16 on an H200 (call 4): 144.7 us against version 5's (cuBLASLt) 158.1 and 10's
152.5 in the same bench: 1.09x cuBLASLt, ~534 TFLOP/s. Promoted: the trainer's B = 16 step took
27.68 / 27.55 ms against 28.00 / 27.75 with version 5, PyTorch 37.22 in the same call. (Its first
cut, without the turns, read a stage a tile's worth of phases early and faulted: call 3.)
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma and setmaxnreg: a Hopper

[[launch]]
kernel = "matmul_forward_gelu12"
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
matmul_forward_gelu12(const TmaMap* map_inp, const TmaMap* map_weight, const TmaMap* map_out, const TmaMap* map_pre,
                      const bf16* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_pingpong<TILE_N, STAGES, GROUP, true>(map_inp, map_weight, map_out, map_pre, bias, M, N, K);
#else
    __trap();  // TMA, wgmma and setmaxnreg need sm_90a (a Hopper GPU): see the header
#endif
}
