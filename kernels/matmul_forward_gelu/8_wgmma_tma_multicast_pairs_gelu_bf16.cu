/*
title = "bf16: version 7 in clusters of two blocks that share each B tile by TMA multicast"
builds_on = 7
precision = "bf16"
changed = """
The blocks run in clusters of two (__cluster_dims__) that take vertically adjacent 128 x 192
tiles, which need the same 192 x 64 tiles of weight. Each block's producer loads one half of
each (96 rows) and the TMA writes it into both blocks' shared memory (multicast), so L2 serves
the weight once for two output tiles: per k-step 16 + 12 KB a block instead of 16 + 24. A stage
is refilled only once both blocks' consumers have released it (gemm_wgmma.cuh's CLUSTER = 2).
"""
why = """
Version 7's main loop alone runs as long as the whole kernel (207.8 against 209.0 us at B = 16 on
an H200, results/h200-session15-2026-12-02 call 4): the epilogue hides behind the loads, and the
loads are what is slow: ~4.8 TB/s out of L2 for 371 TFLOP/s. cuBLASLt's kernel at this shape has
the same 128 x 192 tile in clusters of two (nvjet_sm90_tst_128x192_64x5_2x1) and reads 30% less
from L2 for the same work. Measured (call 5): 271 us against version 7's 210, slower: L2's
bandwidth was not the limit (version 7's L2 hit rate is 96%), and coupling the two blocks' rings
(a stage is refilled only when both have released it) makes each wait on the other.
Session 20 found a cost in how the coupling was written: each consumer warp's arrive on the other
block's barrier was a .release.cluster, a cluster-wide fence of the warp's earlier writes. With
the arrive at the block's scope (gemm_wgmma.cuh's mbar_arrive_in) this version runs 217.0 / 217.7
us at B = 16 on an H100 against version 7's 224.8 / 224.5 in the same call: 3% faster
(results/h100-session20-2026-12-06/call4; sanitizers 4 of 4 clean there).
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA and wgmma: a Hopper

[[launch]]
kernel = "matmul_forward_gelu8"
grid = "2 * min(cdiv(cdiv(N, 128), 2) * cdiv(OC, 192), SMS // 2)"
block = 384
shared = "1024 + 4 * (128 + 192) * 128 + 16 * 4 + 2 * 64 * 400"
args = ["tma:inp, N, C, 128, 64", "tma:weight, OC, C, 96, 64", "out", "pre", "bias", "N", "OC", "C"]
*/
#include "gelu_gemm.cuh"  // gelu_gemm: the main loop (gemm_wgmma.cuh) and the staged epilogue

constexpr int TILE_N = 192;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight

extern "C" __global__ void GEMM_PAIRS __launch_bounds__(384, 1)
matmul_forward_gelu8(const TmaMap* map_inp, const TmaMap* map_weight, bf16* out, bf16* pre, const bf16* bias, int M,
                     int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gelu_gemm<TILE_N, STAGES, 2>(map_inp, map_weight, out, pre, bias, M, N, K);
#else
    __trap();  // TMA and wgmma need sm_90a (a Hopper GPU): see the header
#endif
}
