/*
title = "bf16: version 10 in clusters of two blocks that share each weight^T tile by TMA multicast (ping-pong, pairs)"
builds_on = 10
precision = "bf16"
changed = """
Version 10's input-gradient kernel run in clusters of two blocks (__cluster_dims__(2, 1, 1)) that
take vertically adjacent 128 x 128 tiles of dpre, so both need the same 128 x 64 tiles of
weight^T: each block's producer loads its own tile of dout and one half (64 rows) of weight^T's,
which the TMA writes into both blocks' shared memory (gemm_wgmma.cuh's CLUSTER = 2 with the
ping-pong order; groups of 8 pairs, version 10's 16 row blocks). The second tile of a pair past
N's last row block writes no partials. Everything else is version 10's, the weight gradient and
the slice add included.
"""
why = """
matmul_forward_gelu 16's reason: a block of 128 x 128 tiles reads 32 KB from L2 a k-step, about
11 TB/s over the SMs at the plain GEMM's rate; in pairs, 24 KB. In the B = 32 step (session 18,
call C) this kernel took 298.5 us a layer where a plain GEMM of its FLOPs takes ~210.
"""
preconditions = ["C % 8 == 0", "OC % 8 == 0"]
arch = "sm_90a"  # TMA, wgmma, setmaxnreg and clusters: a Hopper

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
kernel = "matmul_backward_dgelu11"
grid = "2 * min(cdiv(cdiv(N, 128), 2) * cdiv(C, 128), SMS // 2)"
block = 384
shared = "1024 + 4 * (128 + 128) * 128 + 1024 + 2 * 128 * 128 * 2 + 2 * 4 * 128 * 4"
args = ["tma:dout, N, OC, 128, 64", "tma:weight_t, C, OC, 64, 64", "tma:dpre, N, C, 128, 64", "tma:pre, N, C, 128, 64",
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

constexpr int BATCH = 32;      // pre words loaded before any is computed and stored (a row block's all)
constexpr int PAIR_GROUP = 8;  // pairs of row blocks a group of tiles (version 10's 16 row blocks)

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PAIRS __cluster_dims__(2, 1, 1)  // two blocks a cluster (Hopper; elsewhere the body is a trap)
#else
#define PAIRS
#endif

extern "C" __global__ void PAIRS __launch_bounds__(384, 1)
matmul_backward_dgelu11(const TmaMap* map_dout, const TmaMap* map_weight_t, const TmaMap* map_dpre,
                        const TmaMap* map_pre, float* partial, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_dgelu<TILE_N, STAGES, PAIR_GROUP, true, BATCH, 2>(map_dout, map_weight_t, map_dpre, map_pre, partial, M,
                                                               N, K);
#else
    __trap();  // TMA, wgmma, setmaxnreg and clusters need sm_90a (a Hopper GPU): see the header
#endif
}
