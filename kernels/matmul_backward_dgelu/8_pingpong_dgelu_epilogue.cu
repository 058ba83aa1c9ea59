/*
title = "bf16: our ping-pong GEMM with gelu' and the column sums in its epilogue (pre loaded by the TMA under the products)"
builds_on = 7
precision = "bf16"
changed = """
The input gradient is matmul_forward_gelu 12's kernel (kernels/common/gemm_tma.cuh's
gemm_tma_dgelu: two consumer warpgroups taking whole 128 x 128 tiles in turn) with another
epilogue. It wants B as rows of k (N x K), so a first kernel writes weight^T (C x OC, 4.7 MB at
GPT-2's fcproj) into scratch. For each tile the warpgroup asks the TMA for pre's 128 x 128 tile into
its staging area before its products start; after them each thread turns the pre it finds where its
accumulators go into dpre = gelu'(pre) * dout @ weight (from the fp32 sums: one rounding, as
version 6), the copy engine stores dpre, and the tile's column sums of the rounded dpre go into a
row of partials (one a 128-row block), which version 5's slice add finishes. The weight gradient
is version 7's.
"""
why = """
In the B = 32 bf16 step on an H200 (results/h200-session17-2026-12-02/call1) version 7 is a plain
cuBLASLt GEMM (207 us a layer) and dgelu_in_place_partials7 (157 us), which reads the GEMM's output
and pre and writes dpre again: 364 us a layer. matmul_forward_gelu 12 does a GEMM of this very
shape (16384 or 32768 x 3072 x 768) with a heavier epilogue (two outputs) in 276 us at B = 32. Here
pre is read once, dpre written once, and nothing goes back through memory for the sums.
Measured on an H200 (session 17, call 2): the family at B = 32 543.3 us against version 7's 597.7
and 6's 547.1 in the same bench; at B = 16 288.4 against 7's 291.5. Promoted: the trainer's bf16 step
took 27.38 ms at B = 16 (7: 27.58) and 53.03 at B = 32 (7: 53.14), PyTorch 38.17 and 69.31 in the
same call. Its epilogue does not hide under the products: in the step its GEMM takes 175 us a layer
at B = 16 (call 3's profile) against ~108 for the main loop alone; version 9 takes up the cost.
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
kernel = "matmul_backward_dgelu8"
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
// The slice add (dgelu_bias_add5): version 5's kernel, included from its file.
#include "5_cublaslt_dgelu_bf16_column_sums_at_copy_speed.cu"
#include "gemm_tma.cuh"  // gemm_tma_dgelu: the ping-pong main loop (gemm_wgmma.cuh) and the dgelu epilogue

constexpr int TILE_N = 128;  // a tile's columns (its rows: 128)
constexpr int STAGES = 4;    // k-steps of 64 in flight
constexpr int GROUP = 16;    // row blocks a group of tiles

// out (cols x rows) = in^T, in rows x cols (bf16): a block moves a 32 x 32 tile through shared
// memory, reading rows of in and writing rows of out; a 17-word row pitch keeps the column reads
// off a single bank.
extern "C" __global__ void transpose_weight8(bf16* out, const bf16* in, int rows, int cols) {
    __shared__ bf16 tile[32][34];
    const int c = blockIdx.x * 32 + threadIdx.x, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8)
        if (r0 + i < rows && c < cols) tile[i][threadIdx.x] = in[(size_t)(r0 + i) * cols + c];
    __syncthreads();
    const int r = r0 + threadIdx.x;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int oc = blockIdx.x * 32 + i;
        if (oc < cols && r < rows) out[(size_t)oc * rows + r] = tile[threadIdx.x][i];
    }
}

extern "C" __global__ void __launch_bounds__(384, 1)
matmul_backward_dgelu8(const TmaMap* map_dout, const TmaMap* map_weight_t, const TmaMap* map_dpre,
                       const TmaMap* map_pre, float* partial, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    gemm_tma_dgelu<TILE_N, STAGES, GROUP>(map_dout, map_weight_t, map_dpre, map_pre, partial, M, N, K);
#else
    __trap();  // TMA, wgmma and setmaxnreg need sm_90a (a Hopper GPU): see the header
#endif
}
