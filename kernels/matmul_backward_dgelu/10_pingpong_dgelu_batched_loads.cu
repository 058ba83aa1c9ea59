/*
title = "bf16: version 9 with the epilogue's shared-memory loads in batches (the loads of 32 words, then their arithmetic, then their stores)"
builds_on = 9
precision = "bf16"
changed = """
gemm_tma_dgelu's W = 32: in dgelu_in_place each thread first loads all 32 pre words of its row
block from the staging area, then computes the 32 dpre words, then stores them over the pre words.
Versions 8 and 9 take one word at a time (load, gelu', store, next load). Everything else is
version 9's.
"""
why = """
A load may not be moved above a store to memory it might alias. The staged addresses are swizzled
with the thread's row ((j % 8) ^ g), so the compiler cannot prove that one word's address differs
from the next one's. In versions 8 and 9 each word's load therefore waits for the previous word's
store: per row block, a chain of 32 dependent round trips (the shared-memory load, then gelu',
then the pack). Only one warp a scheduler does the epilogue (the other warpgroup's warp is at its
products), so nothing hides that chain. Loading the 32 words first leaves one round trip a row
block. The registers are there: ptxas reports no spills at 32 (168 registers, as version 9).
The SASS confirms both orders (results/h200-session18-2026-12-02/callA/sass-excerpt.txt).
Measured on an H200 (session 18, call A), the family alone: 268.7 us at B = 16 against version 8's
289.2, 507.8 at B = 32 against 553.3 (session 17 measured 9 at 273.0 / 516.0 beside 8's 296.5 /
580.4): the batches add little to 9's hardware tanh. In the step under the profiler (call C, B =
32) the kernel takes 298.5 us a layer, against 338 for version 8 (session 17, call 3). Promoted
with matmul_forward_gelu 14. The trainer's bf16 step (call A): 27.85 ms at B = 16 and 54.28 at
B = 32 with 10 alone, 27.97 / 54.61 with 8, PyTorch 37.16 / 69.32. The step's GPU tests pass
(call B), and racecheck finds 0 hazards in its three kernels without the library step (call B).
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma and setmaxnreg: a Hopper

[derived]
SLICES = "cdiv(N, 128)"  # a row of partials a 128-row block

[scratch]
partial = "SLICES * C"
weight_t = { size = "C * OC", dtype = "bf16" }

[[launch]]
kernel = "transpose_weight8"
grid = ["cdiv(C, 32)", "cdiv(OC, 32)"]
block = [32, 8]
args = ["weight_t", "weight", "OC", "C"]

[[launch]]
kernel = "matmul_backward_dgelu10"
grid = "min(cdiv(N, 128) * cdiv(C, 128), SMS)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2 + 2 * 4 * 128 * 4"
args = ["tma:dout, N, OC, 128, 64", "tma:weight_t, C, OC, 128, 64", "tma:dpre, N, C, 128, 64", "tma:pre, N, C, 128, 64",
        "partial", "N", "C", "OC"]

[[launch]]
kernel = "dgelu_bias_add5"
grid = "cdiv(C, 256)"
block = 256
args = ["dpre_bias", "partial", "C", "SLICES"]

[[launch]]
library = "gemm_lt"
a = "dout"
b = "inp"
d = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
dtype = "bf16"
tune = 8
*/
// The transpose (transpose_weight8) and, through it, version 5's slice add: version 8's kernels.
#include "8_pingpong_dgelu_epilogue.cu"

constexpr int BATCH = 32;  // pre words loaded before any is computed and stored (a row block's all)

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_backward_dgelu10(const TmaMap* map_dout, const TmaMap* map_weight_t, const TmaMap* map_dpre,
                        const TmaMap* map_pre, float* partial, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_dgelu<TILE_N, STAGES, GROUP, true, BATCH>(map_dout, map_weight_t, map_dpre, map_pre, partial, M, N, K);
#else
    __trap();  // TMA, wgmma and setmaxnreg need sm_90a (a Hopper GPU): see the header
#endif
}
