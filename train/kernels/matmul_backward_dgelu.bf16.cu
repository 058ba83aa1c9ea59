/*
title = "bf16: version 10 with the slices' column sums added by 8 warps a 32-column stripe (a 96-block grid, not 12)"
builds_on = 10
precision = "bf16"
changed = """
Only the launch after the GEMM changes. Version 10 adds the partials (one row of C fp32 sums a
128-row block of the GEMM) with version 5's slice add: one thread a column, each walking all
SLICES rows. Here a (32, 8) block takes 32 columns, each of its eight warps every eighth row of
partials, and the eight parts meet in a fixed order (kernels/common/column_parts.cuh): the same
bits every run, in another order than version 10's.
"""
why = """
At B = 32 the partials are 256 rows of 3072 columns (3.1 MB), and version 5's add runs 12 blocks
of 256 threads: a dozen SMs, each thread 256 dependent-address loads in a row. In the B = 32
step's profile (results/h100-session22-2026-12-06/call4) that kernel takes 12 us a layer for
3.1 MB, ~0.26 TB/s. With 8 warps a stripe, 96 blocks reach most SMs and each thread has 32 loads:
the read should take a few microseconds, ~0.1 ms a step over 12 layers.
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
kernel = "dgelu_bias_add11"
grid = "cdiv(C, 32)"
block = [32, 8]
shared = "8 * 32 * 4"
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
// The transpose and the GEMM with its dgelu epilogue: version 10's kernels.
// ---- begin 10_pingpong_dgelu_batched_loads.cu ----
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
// ---- begin 8_pingpong_dgelu_epilogue.cu ----
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
// ---- begin 5_cublaslt_dgelu_bf16_column_sums_at_copy_speed.cu ----
/*
title = "bf16: version 4 with dpre's column sums read at the copy's speed (more slices, four rows in flight)"
builds_on = 4
precision = "bf16"
changed = "dgelu_column_partials gets four blocks of 256 columns per SM (SLICES = SMS * 4 / column tiles, at least 32 rows a slice) where version 4 had 16 slices, and each warp issues the loads of four rows before it adds them (in the same row order as version 4)."
why = """
In the trainer's bf16 step on the H100 (GPT-2 124M, B=16, results/h100-session10-2026-11-28/call1)
version 4's column sums took 48.6 us a call for 100 MB of dpre: 2.07 TB/s, 69% of the copy
ceiling, 0.58 ms of the 29.7 ms step (1.08 ms at B=32). Its grid at C = 3072 is 12 column tiles x
16 slices = 192 blocks, 1.5 a multiprocessor, each warp with one 16-byte load in flight: too few
bytes on the way to cover the memory's latency. Four blocks per SM with four loads each in flight
keep ~64 KB a multiprocessor in flight. The partials grow to SLICES x C floats (44 slices at C = 3072 on 132
SMs: 0.5 MB), which stay in L2 for the add; the sums keep version 4's order within a warp.
"""
preconditions = ["C % 8 == 0"]

[derived]
SLICES = "max(1, min(cdiv(N, 32), SMS * 4 // cdiv(C, 256)))"  # four blocks of 256 columns per SM, >= 32 rows each
ROWS = "cdiv(N, SLICES)"

[scratch]
partial = "SLICES * C"

[[launch]]
library = "gemm_lt"
a = "dout"
b = "weight"
d = "dpre"
m = "N"
n = "C"
k = "OC"
dgelu = true
aux = "pre"
dtype = "bf16"

[[launch]]
kernel = "dgelu_column_partials5"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "N", "C", "ROWS"]

[[launch]]
kernel = "dgelu_bias_add5"
grid = "cdiv(C, 256)"
block = 256
args = ["dpre_bias", "partial", "C", "SLICES"]

[[launch]]
library = "gemm"
a = "dout"
b = "inp"
c = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
dtype = "bf16"
*/
// ---- begin bf16.cuh ----
// bf16.cuh: bfloat16 storage for the bf16 versions: the type, 128-bit packs of eight, and
// conversions, so every bf16 kernel moves memory the same way.
//
// Shared because each bf16 version of a memory-bound family reads and writes 16 bytes per thread
// per access (eight bf16 values), converts to float for its arithmetic and back to bf16 to store.
//
// bf16 (= __nv_bfloat16): 1 sign, 8 exponent, 7 mantissa bits; float's range, ~3 significant
//   digits. Arithmetic is done in float; only storage is bf16.
// Pack8: eight bf16 in 16 bytes, aligned to 16. load8/store8 are plain 128-bit accesses;
//   load8_stream/store8_stream use the streaming cache hints (__ldcs/__stcs: data touched once,
//   evict first) for inputs and outputs no later kernel of the same launch reads again.
//   The pointer must be 16-byte aligned: an index that is a multiple of 8 elements from a
//   cudaMalloc'd base.
// to_float / to_bf16: the conversions, round to nearest even.

#ifndef KERNELS_COMMON_BF16_CUH
#define KERNELS_COMMON_BF16_CUH

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

struct alignas(16) Pack8 {
    bf16 v[8];
};

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ Pack8 load8(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
    return out;
}

__device__ __forceinline__ void store8(bf16* p, const Pack8& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

__device__ __forceinline__ Pack8 load8_stream(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
    return out;
}

__device__ __forceinline__ void store8_stream(bf16* p, const Pack8& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

#endif  // KERNELS_COMMON_BF16_CUH

// ---- end bf16.cuh ----  // bf16, Pack8, load8, to_float/to_bf16
// ---- begin slice_sums.cuh ----
// slice_sums.cuh: matmul_backward_dgelu 4 and 5's last step, shared by both.
//
// add_slice_sums(dpre_bias, partial, C, slices)
//   dpre_bias[c] += the slices' fp32 column sums partial[k * C + c], added in slice order (the same
//   bits every run) and rounded to bf16 once. One thread a column; call with a 1-D grid over C.

#ifndef KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH
#define KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH
// (already included: bf16.cuh)

__device__ __forceinline__ void add_slice_sums(bf16* dpre_bias, const float* partial, int C, int slices) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f;
    for (int k = 0; k < slices; ++k) s += partial[(size_t)k * C + c];
    dpre_bias[c] = to_bf16(to_float(dpre_bias[c]) + s);
}

#endif  // KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH

// ---- end slice_sums.cuh ----  // add_slice_sums

// partial[s * C + c] = the sum over the rows of slice s (rows s*rows .. s*rows + rows - 1) of
// dpre[row, c], in fp32. A block: 256 columns, eight a thread (C % 8 == 0: whole 16-byte packs),
// its eight warps taking every eighth row of the slice, four such rows loaded before any is added;
// the warps' sums meet in shared memory.
extern "C" __global__ void dgelu_column_partials5(float* partial, const bf16* dpre, int N, int C, int rows) {
    __shared__ float sums[8][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 256 + 8 * lane;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        const bf16* col = dpre + c;
        int r = r0 + warp;
        for (; r + 24 < r1; r += 32) {
            Pack8 p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) p[u] = load8(col + (size_t)(r + 8 * u) * C);
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int j = 0; j < 8; ++j) s[j] += to_float(p[u].v[j]);
        }
        for (; r < r1; r += 8) {
            Pack8 p = load8(col + (size_t)r * C);
#pragma unroll
            for (int j = 0; j < 8; ++j) s[j] += to_float(p.v[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sums[warp][lane][j] = s[j];
    __syncthreads();
    if (warp == 0 && c < C) {
        for (int j = 0; j < 8; ++j) {
            float t = sums[0][lane][j];
            for (int w = 1; w < 8; ++w) t += sums[w][lane][j];
            partial[(size_t)blockIdx.y * C + c + j] = t;
        }
    }
}

// dpre_bias[c] += the slices' sums, added in slice order (the same bits every run), rounded once.
extern "C" __global__ void dgelu_bias_add5(bf16* dpre_bias, const float* partial, int C, int slices) {
    add_slice_sums(dpre_bias, partial, C, slices);
}

// ---- end 5_cublaslt_dgelu_bf16_column_sums_at_copy_speed.cu ----
// ---- begin gemm_tma.cuh ----
// gemm_tma.cuh: a whole Hopper GEMM kernel body (sm_90a), D = A B^T + bias, optionally with the
// GELU: gemm_wgmma.cuh's main loop, then an epilogue whose stores the copy engine makes.
// matmul_forward 9 (the bias) and matmul_forward_gelu 10, 11 and 15 (pre and gelu(pre)) are built on
// gemm_tma; matmul_forward 10 and matmul_forward_gelu 12-14 and 16 on gemm_tma_pingpong, and
// matmul_backward_dgelu 8-10 on gemm_tma_dgelu (its epilogue the GELU's backward; below).
//
// gemm_tma<BN, STAGES, BUFFERS, GELU, GIVE_REGS>(map_a, map_b, map_out, map_pre, bias, M, N, K):
//   pre = A B^T + bias (M x N, row-major; A M x K, B N x K, both row-major bf16), written through
//   map_pre; with GELU also out = gelu(pre) through map_out (computed from the fp32 sum, not from
//   pre's rounding). map_a's box is 128 x 64, map_b's BN x 64, map_out's and map_pre's 64 x 64.
//
// The epilogue of a consumer warpgroup (64 rows of a 128 x BN tile): it adds the bias to its
// accumulators in place, writes them rounded to bf16 into shared memory as BN / 64 boxes of
// 64 x 64 (128-byte rows in the TMA's 128-byte swizzle, 8 KB each, 1024-aligned), and its first
// thread hands the boxes to the copy engine (tma_store_2d), which writes them to global memory,
// and nothing past M or N, while the warpgroup goes on. With GELU it then computes gelu(pre) into
// registers of its own while pre's boxes go out and stages and stores those the same way: in the
// same staging area once the engine has read pre's boxes (BUFFERS = 1), or in a second one
// (BUFFERS = 2). Before the next tile's writes, the issuing thread waits until the engine has read
// the last boxes; before the block ends, until every store is performed.
//
// GIVE_REGS: the producer warpgroup gives registers back (setmaxnreg: 40 for it, 232 for each
// consumer), for tiles whose accumulators and gelu(pre) words outgrow 168 (BN = 256).
//
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 (the ring) + 1024 (its barriers, padded
// so the staging stays 1024-aligned) + 2 * BUFFERS * BN * 128 (the staging of two warpgroups).
//
// The staged layout: the accumulator pair (d[4 j + 2 h], d[4 j + 2 h + 1]) of row r = 16 q + g +
// 8 h, columns 8 j + 2 t and 8 j + 2 t + 1 (gemm_wgmma.cuh's layout) lies in box j / 8, row r,
// 16-byte chunk (j % 8) ^ (r % 8) = (j % 8) ^ g (the swizzle), bytes 4 t of it: a warp's 32
// four-byte writes for one (j, h) fall in 32 different banks.

#ifndef KERNELS_COMMON_GEMM_TMA_CUH
#define KERNELS_COMMON_GEMM_TMA_CUH
// (already included: bf16.cuh)
// ---- begin gelu.cuh ----
// gelu.cuh: the tanh-approximation GELU and its derivative, for gelu_forward and gelu_backward.
//
// Shared because every version of both families carried the same constants and formulas; what
// the versions change is how elements reach them (packing, unrolling), not the math.
//
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//   Written as x / (1 + exp(-2u)), since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): under
//   --use_fast_math tanhf is the hardware tanh.approx.f32 (relative error about 2^-11, far outside
//   the 1e-5 tolerance), while the fast exp is good to a few ulp, and the logistic form has no
//   cancellation for negative x. The exponent is clamped at 80, so exp never overflows.
// gelu_grad(x) = d gelu / dx
//   With s = 1 / (1 + e), e = exp(-2u): 1 - tanh^2(u) = 4 s (1 - s) and 1 - s = e s, so
//   gelu'(x) = s + 2 x s (e s) u'. 1 - tanh^2 computed directly would cancel catastrophically
//   in the tails; e * s does not, and the clamp keeps e finite so e * s is never inf * 0.

#ifndef KERNELS_COMMON_GELU_CUH
#define KERNELS_COMMON_GELU_CUH

constexpr float GELU_SCALE = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float GELU_CUBIC = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + __expf(fminf(-2.0f * u, 80.0f)));
}

__device__ __forceinline__ float gelu_grad(float x) {
    float x2 = x * x;
    float u = GELU_SCALE * (x + GELU_CUBIC * x2 * x);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x2);
    float e = __expf(fminf(-2.0f * u, 80.0f));
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * s * (e * s) * du;
}

// gelu_tanh(x): the same GELU through the hardware tanh (tanh.approx.f32, relative error about
// 2^-11) as 0.5 x + 0.5 x tanh(u): one special-function op where gelu() takes two (the exponential
// and the reciprocal). Too coarse for the fp32 families' 1e-5; for outputs rounded to bf16 (2^-9)
// it is inside the rounding (gemm_tma.cuh's GELU epilogue).
__device__ __forceinline__ float gelu_tanh(float x) {
    const float u = x * fmaf(GELU_SCALE * GELU_CUBIC, x * x, GELU_SCALE);
    float th;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(th) : "f"(u));
    const float hx = 0.5f * x;
    return fmaf(hx, th, hx);
}

// gelu_grad_tanh(x): gelu'(x) through the hardware tanh: with th = tanh(u) and h = (1 + th) / 2,
// gelu'(x) = h + x h (1 - th) u'. One special-function op where gelu_grad takes two. Where th is
// near +-1 (|x| > ~2) the hardware tanh's documented error bound (~5e-4) is a large share of 1 - th or
// 1 + th, so by that bound gelu' could err by ~3e-3 there. Measured on an H200 it errs by at most
// 1.6e-5 over [-12, 12] (matmul_backward_dgelu 9's header): for a dpre rounded to bf16.
__device__ __forceinline__ float gelu_grad_tanh(float x) {
    const float x2 = x * x;
    const float u = x * fmaf(GELU_SCALE * GELU_CUBIC, x2, GELU_SCALE);
    const float du = fmaf(3.0f * GELU_SCALE * GELU_CUBIC, x2, GELU_SCALE);
    float th;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(th) : "f"(u));
    const float h = fmaf(0.5f, th, 0.5f);
    return fmaf(x * h * (1.0f - th), du, h);
}

#endif  // KERNELS_COMMON_GELU_CUH

// ---- end gelu.cuh ----         // gelu_tanh, gelu_grad, gelu_grad_tanh
// ---- begin gemm_wgmma.cuh ----
// gemm_wgmma.cuh: the main loop of a Hopper GEMM (sm_90a) with a fused epilogue of the caller's:
// TMA copies into a ring of shared-memory stages, wgmma with 64 x BN x 16 instructions, one
// producer warp and two consumer warpgroups; optionally two blocks a cluster sharing B's tiles,
// tiles in groups of row blocks, or each warpgroup on whole tiles of its own (ping-pong).
// matmul_forward_gelu 7-16 and matmul_forward 9-10 are built on it (10-16 and 9-10 through
// gemm_tma.cuh, which also holds the TMA stores' side: tma_store_2d, bulk_commit, bulk_wait*).
//
// D (M x N, row-major) = A (M x K, row-major) B^T, B given as N x K row-major (a Linear layer's
// weight): both operands "K-major", the k index running along their rows, as wgmma.cuh's Q and K.
//
// ---- The block ----------------------------------------------------------------------------
// 384 threads, one block an SM, persistent: block b takes output tiles b, b + gridDim.x, ... of
// BM = 128 rows by BN columns (tile t is row block t / tiles_n, column block t % tiles_n: the blocks
// in flight share B's columns and a few of A's rows in L2); in pairs with CLUSTER = 2 (below).
// * Warpgroup 0 is the producer: its thread 0 alone works. For each tile and each k-step of 64 it
//   waits for a free stage, then asks the TMA for A's 128 x 64 and B's BN x 64 boxes into it. The
//   TMA writes them in the 128-byte-swizzled layout that wgmma.cuh describes (given 1024-byte
//   aligned stages), fills what lies past M, N or K with zeros, and completes the stage's `full`
//   barrier when the bytes have landed. The producer runs ahead of the consumers by up to STAGES
//   k-steps, across tiles too: while they run a tile's epilogue, the next tile's loads proceed.
// * Warpgroups 1 and 2 are the consumers: warpgroup 1 + w computes rows 64 w .. 64 w + 63 of the
//   tile, an accumulator of BN / 2 floats a thread (wgmma's D layout, below). A k-step is four
//   wgmma (k = 16 each) on the stage, one commit; the stage is handed back (its `empty` barrier,
//   one arrival per consumer warp) once the next k-step's group is issued and this one has
//   completed (wgmma_wait<1>), so the tensor cores always have a group queued.
// * GemmRing<BN, STAGES, CLUSTER, GROUP, PINGPONG>: GROUP > 1 orders the tiles in groups of GROUP
//   slot rows (row blocks; with CLUSTER = 2, pairs of them), each group column block by column
//   block (origin), so that a B larger than L2 (the lm head's 77 MB weight) is read from memory
//   once a group, not once a row block. PINGPONG gives
//   each consumer warpgroup whole tiles (consume_tile: two 64-row halves), the block's tiles in
//   turn, so one's epilogue runs under the other's products; the two take turns at the ring
//   (consume_tile says why they must) and a stage is released by one warpgroup's 4 warps.
//
// ---- The accumulator (per consumer thread: warp q of its warpgroup, g = lane / 4, t = lane % 4)
// d[4 j + e] = D[64 w + 16 q + g + 8 (e / 2)][8 j + 2 t + (e % 2)], j = 0 .. BN / 8 - 1: wgmma.cuh's
// 64 x 64 layout continued to BN columns. Each thread holds two rows' pairs of adjacent columns.
//
// ---- The tensor maps (workbench/tensor_maps.py) -------------------------------------------
// The kernel receives pointers to A's and B's maps in device memory (the header's "tma:" args):
// each describes a row-major bf16 matrix (rows x cols, cols % 8 == 0), a box of rows x 64
// elements, 128-byte swizzle, zero fill. A's box is 128 rows, B's BN. The host wrote them with
// ordinary copies, so the producer acquires them for the TMA's own path (tensormap_acquire)
// before its first copy.

#ifndef KERNELS_COMMON_GEMM_WGMMA_CUH
#define KERNELS_COMMON_GEMM_WGMMA_CUH

#include <stdint.h>
// ---- begin mbarrier.cuh ----
// mbarrier.cuh: shared-memory barriers (mbarriers, sm_90) between the warps that fill a buffer
// and those that read it: attention_forward 13-15's producer warps, and the TMA GEMMs
// (common/gemm_wgmma.cuh), whose copies complete a barrier's phase themselves.
//
// An mbarrier is a 64-bit object in shared memory, initialised with the number of arrivals that
// complete its current phase; when they have all arrived the phase completes, its parity bit
// flips and the count starts again. A waiter names the parity of the phase it waits to see
// completed: phase k of a barrier used once per round is waited for with parity k & 1.
//
// mbar_init(bar, count): one thread, before any use, then a __syncthreads.
// mbar_arrive(bar): one arrival of the calling thread.
// mbar_arrive_on_copies(bar): an arrival that happens once every cp.async this thread issued
//   before the call has landed (cp.async.mbarrier.arrive.noinc: it is one of the initialised
//   count, not an extra one); the thread itself does not wait.
// mbar_wait(bar, parity): spins (try_wait) until the phase of that parity has completed; the
//   waiter then sees the memory that the arriving threads wrote before arriving.
// `bar` is the barrier's shared-space address (smem_addr).
//
// mbar_expect_tx(bar, bytes): one arrival that also says `bytes` more are to land by asynchronous
//   copies naming this barrier (TMA: cp.async.bulk.tensor ... mbarrier::complete_tx); the phase
//   completes when every arrival has come and every announced byte has landed.
// mbar_init_fence(): after the barriers' mbar_init, before the __syncthreads that publishes them,
//   so that the asynchronous copies (another proxy) see them initialised.

#ifndef KERNELS_COMMON_MBARRIER_CUH
#define KERNELS_COMMON_MBARRIER_CUH

#include <stdint.h>

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

#endif  // KERNELS_COMMON_MBARRIER_CUH

// ---- end mbarrier.cuh ----
// ---- begin wgmma.cuh ----
// wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only) for 64 x 64 x 16 bf16 products
// with fp32 accumulators, the shared-memory layout it reads (rows of 128 bytes, 128-byte swizzle)
// and the matrix descriptors that describe that layout to it. attention_forward 12-14 and
// attention_backward 12 and 13 use it.
//
// ---- What changes from mma.sync ------------------------------------------------------------
// mma.sync (mma.cuh) is a warp's instruction: 16 x 8 x 16, both operands in registers, each
// fetched from shared memory by ldmatrix first. wgmma is a warpgroup's (4 consecutive warps, 128
// threads, the first warp's index a multiple of 4): 64 x N x 16 in one instruction, B read by
// the tensor cores straight from shared memory, A from shared memory or from registers. It is
// asynchronous: it returns at once, and the accumulators may be read only after
//     wgmma_commit();      // closes a group of the wgmma issued so far by this warpgroup
//     wgmma_wait<N>();     // waits until at most N groups are still in flight
// and before a wgmma uses registers that ordinary instructions wrote (accumulators rescaled, an A
// fragment packed) the warpgroup issues wgmma_fence(). Shared memory written by ordinary stores or
// cp.async must be made visible to the tensor cores' own path (the "async proxy") by
// fence_proxy_async() in each writing thread, before the barrier that precedes the wgmma.
//
// ---- Fragments (per warp w of the warpgroup, g = lane / 4, t = lane % 4) ---------------------
// D (64 x 64 fp32): d[n][e] = D[16 w + g + 8 (e / 2)][8 n + 2 t + (e % 2)], n = 0..7: the warp's
//   16 rows, laid out exactly like eight mma.sync m16n8 accumulators side by side.
// A in registers (64 x 16 bf16): a[0..3] as mma.sync's m16n8k16 A fragment of the warp's 16 rows
//   (mma.cuh): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] =
//   A[g+8][2t+8, 2t+9]. So an accumulator of keys 16 kk .. 16 kk + 15 packed to bf16 pairs
//   ({d[2kk][0,1]}, {d[2kk][2,3]}, {d[2kk+1][0,1]}, {d[2kk+1][2,3]}) is the A fragment of a k-step
//   of the next product: flash attention's P never leaves registers.
//
// ---- The shared-memory tiles ----------------------------------------------------------------
// A tile is rows of 64 bf16 (128 bytes), starting on a 1024-byte boundary. The 16-byte chunk c
// (elements 8c .. 8c + 7) of row r sits at byte r * 128 + 16 (c ^ (r % 8)): sw128(r, c). The XOR
// (the "128-byte swizzle") puts the same chunk of 8 consecutive rows in 8 different bank groups,
// which is what the tensor cores' reads need, and is the pattern the descriptor names (mode 1).
// Each operand is described by its major-ness, the dimension along which its 128-byte rows run:
// * K-major (the product's k index runs along the row): Q and K in S = Q K^T (k = the channel).
//   Rows r are the m (or n) index; 8-row groups 1024 bytes apart (the stride "SBO"). A k-step of
//   16 is 32 bytes further along the row: its descriptor is the tile's plus 32 bytes.
// * MN-major (the n index runs along the row): V in O = P V (k = the key, n = the channel), V's
//   rows as they come from memory. Rows r are the k index; 8-row groups 1024 bytes apart (SBO
//   again); with 64 channels the row is one swizzle width, so the leading offset is unused. A
//   k-step of 16 keys is 16 rows, 2048 bytes further.
//   The instruction's trans-b flag (1) says B is MN-major.
//
// sw128_desc(addr, sbo): the 64-bit descriptor: bits 0-13 the shared address / 16, 16-29 the
// leading byte offset / 16 (1: unused with this swizzle here), 32-45 the stride byte offset / 16,
// 62-63 the swizzle mode (1 = 128-byte). Base offset (bits 49-51) 0: tiles start 1024-aligned.
//
// wgmma_ss(d, da, db, accumulate): d (+)= A B^T-style product with A (64 x 16, K-major) and B
//   (64 x 16 as n x k, K-major) both in shared memory; accumulate = false overwrites d.
// wgmma_rs_bt(d, a, db, accumulate = true): d (+)= A B with A in registers and B (16 x 64 as k x n)
//   MN-major in shared memory; accumulate = false overwrites d.

#ifndef KERNELS_ATTENTION_FORWARD_WGMMA_CUH
#define KERNELS_ATTENTION_FORWARD_WGMMA_CUH

#include <stdint.h>
// ---- begin mma.cuh ----
// mma.cuh: warp-level tensor-core instructions (mma.sync, ldmatrix) and asynchronous copies
// (cp.async) as inline PTX, with the fragment layouts that say which lane holds which element.
//
// Shared because every tensor-core version (attention_forward 7 and 8, and any later matmul-like
// kernel that feeds the tensor cores from registers) needs the same few instructions, and the
// layouts below are the part that is easy to get wrong. Everything here is sm_80+ (Ampere, Hopper).
//
// ---- Notation --------------------------------------------------------------------------------
// A warp's 32 lanes are seen as 8 groups of 4:
//     g = lane / 4   ("groupID" in the PTX ISA): 0..7, picks a ROW of A, C and a COLUMN of B
//     t = lane % 4   ("threadID_in_group"):      0..3, picks the columns (the k index) of A and B
// An mma computes D (M x N) = A (M x K) * B (K x N) + C, "row.col": A is read as rows of K, B as
// columns of K. Each lane holds a few elements of each matrix in registers ("its fragment").
// Registers that hold 16-bit elements hold two: the element with the smaller column (A, C) or
// row (B) index sits in the LOW 16 bits.
//
// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (mma_bf16_16816) -------------------
// A: 16 x 16 bf16, 4 registers of 2:     a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//                                        a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//    i.e. the four 8 x 8 quarters of A in the order top-left, bottom-left, top-right, bottom-right,
//    each quarter spread over the warp the same way: lane (g, t) holds row g, columns 2t, 2t+1.
// B: 16 x 8 bf16 (K x N), 2 registers:  b[0] = B[2t, 2t+1  ][g]       b[1] = B[2t+8, 2t+9][g]
//    i.e. the top and bottom 8 x 8 halves of B; lane (g, t) holds column g, rows 2t, 2t+1.
//    If B = K^T for a row-major K (N rows of K elements), B[k][n] = K[n][k]: b[0] is the pair
//    K[g][2t], K[g][2t+1], adjacent in memory. That is what ".col" means.
// C, D: 16 x 8 f32, 4 registers:        c[0], c[1] = C[g    ][2t], C[g    ][2t+1]
//                                        c[2], c[3] = C[g + 8][2t], C[g + 8][2t+1]
//
// ---- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (mma_tf32_1688) ----------------------
// tf32 elements are 32-bit registers (fp32 bits with the low 13 mantissa bits cleared: to_tf32).
// A: 16 x 8, 4 registers:   a[0] = A[g][t]   a[1] = A[g + 8][t]   a[2] = A[g][t + 4]   a[3] = A[g + 8][t + 4]
// B: 8 x 8 (K x N), 2:      b[0] = B[t][g]   b[1] = B[t + 4][g]
// C, D: 16 x 8 f32: the same layout as for m16n8k16 above.
// Note that A's columns (t, t + 4) differ from C's (2t, 2t + 1): a C fragment cannot be fed back
// as an A fragment directly, unless the k index is renumbered (see attention_forward 7).
//
// ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (ldmatrix_x4, ldmatrix_x4_trans) -------
// Loads four 8 x 8 matrices of 16-bit elements from shared memory, one register per matrix.
// Each matrix row is 8 consecutive elements (16 bytes, 16-byte aligned), and each lane supplies
// the address of ONE row: lanes 0-7 the rows 0-7 of matrix 0, lanes 8-15 those of matrix 1,
// lanes 16-23 matrix 2, lanes 24-31 matrix 3. The rows may be anywhere (any stride).
// Result, register i from matrix i:
//   plain:  lane (g, t) gets row g, elements 2t and 2t+1      (= an A quarter or a B half of K^T)
//   .trans: lane (g, t) gets rows 2t and 2t+1 of column g    (= a B half when B is stored K-major,
//           e.g. V in P V: B[k][n] = V[k][n] with V rows in memory)
// So one ldmatrix_x4 fills a whole m16n8k16 A fragment (matrices = the four quarters, in the
// order above), or the B fragments of two n-tiles (matrices = n-tile 0 top/bottom, n-tile 1
// top/bottom). Bank conflicts: the 8 rows of one matrix are read together; they are conflict-free
// when their start addresses fall in 8 different 16-byte bank groups (row stride = 16 mod 128
// bytes, e.g. a padded row, or an XOR swizzle).
//
// ---- cp.async (cp_async_16, cp_async_4, cp_async_commit, cp_async_wait<N>) --------------------
// cp_async_16(dst, src, valid): copies 16 bytes global -> shared without passing through
// registers (and without L1: .cg). If !valid, src is not read and dst is filled with zeros
// (src-size 0); src must still be a valid-looking address (pass the tensor's base). Both
// addresses 16-byte aligned. The copy is asynchronous: cp_async_commit() closes a group of the
// copies issued so far by this thread; cp_async_wait<N>() waits until at most N of this thread's
// groups are still in flight. Other threads' copies are visible only after a barrier
// (__syncthreads) that follows every thread's wait.
//
// ---- Conversions ----
// to_tf32(x): cvt.rna.tf32.f32, x rounded to the nearest tf32 (10 mantissa bits; ties away from 0).
// pack_bf16x2(lo, hi): two floats rounded to bf16 (nearest even), lo in the low half.

#ifndef KERNELS_COMMON_MMA_CUH
#define KERNELS_COMMON_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

// D = A B + D (accumulates in place).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `row` is this lane's row address (see the layout above): a generic pointer into shared memory,
// or a 32-bit shared-space address (smem_addr; half the registers of a pointer, and a constant
// offset folds into the instruction).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_addr(row)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_trans(r, smem_addr(row)); }

// dst: a generic pointer into shared memory, or its 32-bit shared-space address (smem_addr).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) { cp_async_16(smem_addr(dst), src, valid); }

// cp_async_4(dst, src, valid): the same for 4 bytes (.ca: cached in L1; 16 is the only size .cg
// takes), 4-byte aligned addresses. The backward kernels stage each row's log-sum-exp this way.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

#endif  // KERNELS_COMMON_MMA_CUH

// ---- end mma.cuh ----  // cp_async_16

__device__ __forceinline__ uint32_t sw128(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

// stage_sw128<ROWS, THREADS>(dst, src, rs, valid, any): ROWS rows of 64 bf16 (row r at src + r * rs)
// copied by cp.async into the swizzled tile at shared address dst by THREADS threads (the caller
// commits and waits); rows at or past `valid` are zero-filled, their source `any` (not read).
template <int ROWS, int THREADS>
__device__ __forceinline__ void stage_sw128(uint32_t dst, const bf16* src, size_t rs, int valid, const bf16* any) {
    static_assert(ROWS * 8 % THREADS == 0, "whole passes");
#pragma unroll
    for (int k = 0; k < ROWS * 8 / THREADS; k++) {
        const int i = threadIdx.x + THREADS * k, r = i / 8, c = i % 8;
        const bool ok = r < valid;
        cp_async_16(dst + sw128(r, c), ok ? src + (size_t)r * rs + 8 * c : any, ok);
    }
}

__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WGMMA_D32                                                                                          \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_D32_OPERANDS(d)                                                                            \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
    "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
    "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
    "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32 ", %32, %33, acc, 1, 1, 0, 0;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "l"(da), "l"(db), "r"((int)accumulate));
}

__device__ __forceinline__ void wgmma_rs_bt(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db,
                                            bool accumulate = true) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32
        ", {%32, %33, %34, %35}, %36, acc, 1, 1, 1;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((int)accumulate));
}
#undef WGMMA_D32
#undef WGMMA_D32_OPERANDS
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_ATTENTION_FORWARD_WGMMA_CUH

// ---- end wgmma.cuh ----  // sw128_desc, wgmma_fence / commit / wait

// CUtensorMap's storage: 128 opaque bytes, 64-byte aligned (cuda.h's CUtensorMap, without cuda.h).
struct alignas(64) TmaMap {
    unsigned long long opaque[16];
};

// A kernel of pairs (CLUSTER = 2, below) is declared with GEMM_PAIRS: two blocks a cluster on a
// Hopper; elsewhere nothing (its body is a trap there).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_PAIRS __cluster_dims__(2, 1, 1)
#else
#define GEMM_PAIRS
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void tensormap_acquire(const TmaMap* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
                 : "memory");
}

// tma_load_2d(dst, map, c0, c1, bar): the box whose first element is (column c0, row c1) of the
// map's matrix, into shared memory at dst; completes `bar`'s announced bytes.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// tma_store_2d(map, c0, c1, src): the box at shared address src (the map's swizzled layout, 1024-byte
// aligned) written to the map's matrix at (column c0, row c1); what lies past the matrix's edges is
// not written. Asynchronous: it joins this thread's current bulk group (bulk_commit closes it).
// The threads that wrote src must each fence_proxy_async() (wgmma.cuh) before the barrier that
// precedes the store, so the copy engine reads what they wrote.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups, all but the newest N: done reading their shared memory (the source
// may be written again), or done altogether (bulk_wait: their writes are performed).
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }

#define GEMM_D64                                                                                           \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GEMM_D96                                                                                           \
    GEMM_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "           \
             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GEMM_D128                                                                                 \
    GEMM_D96 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GEMM_F8(i)                                                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define GEMM_F64 GEMM_F8(0), GEMM_F8(8), GEMM_F8(16), GEMM_F8(24), GEMM_F8(32), GEMM_F8(40), GEMM_F8(48), GEMM_F8(56)
#define GEMM_F96 GEMM_F64, GEMM_F8(64), GEMM_F8(72), GEMM_F8(80), GEMM_F8(88)
#define GEMM_F128 GEMM_F96, GEMM_F8(96), GEMM_F8(104), GEMM_F8(112), GEMM_F8(120)

// wgmma_wide<BN>(d, da, db, accumulate): d (+)= A (64 x 16) B^T (B: BN x 16), both K-major in
// shared memory (sw128_desc descriptors); accumulate = false overwrites d. BN = 128, 192 or 256.
template <int BN>
__device__ __forceinline__ void wgmma_wide(float (&d)[BN / 2], uint64_t da, uint64_t db, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_wide<128>(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" GEMM_D64 "}, %64, %65, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F64
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<192>(float (&d)[96], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" GEMM_D96 "}, %96, %97, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F96
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<256>(float (&d)[128], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" GEMM_D128 "}, %128, %129, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F128
        : "l"(da), "l"(db), "r"((int)accumulate));
}
#undef GEMM_D128
#undef GEMM_D96
#undef GEMM_D64
#undef GEMM_F8
#undef GEMM_F96
#undef GEMM_F64
#undef GEMM_F128

// Warpgroup register budgets (sm_90a; the kernel needs a register cap at entry, e.g.
// __launch_bounds__(384, 1)): every thread of the warpgroup executes it, the count a multiple of 8.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }

// ---- Two blocks a cluster (CLUSTER = 2) --------------------------------------------------
// The two blocks of a cluster take vertically adjacent tiles (row blocks 2 i and 2 i + 1, one
// column block), so they need the same B tile. Each block's producer loads half of it (BN / 2
// rows, its rank's half: B's map has a box of BN / 2 rows) and the TMA writes that half into both
// blocks' shared memory (multicast) and completes both blocks' `full` barrier for those bytes: L2
// serves B once for two tiles. A stage may then be refilled only when both blocks' consumers are
// done with it, since either producer writes into both: each consumer warp arrives on the `empty`
// barrier of its own block and of the other (16 arrivals a phase), and the producers wait on it
// with cluster scope. The blocks meet at a cluster barrier after initialising their barriers
// (before either can signal the other's) and again at the end (before either leaves while the
// other may still write to it). With PINGPONG too, both blocks hand the same slot to the same
// warpgroup, so the two blocks' warpgroups release each stage in the same order (4 warps of each
// block: 8 arrivals a phase).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t blocks) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(blocks)
        : "memory");
}
// One arrival on the barrier at the same shared address in the cluster's block `rank`. Its
// release is at the block's scope (the default), as CUTLASS's cluster barriers arrive: what it
// orders is the consumer's wgmma reads of the stage, already complete (wgmma_wait), before the
// other block's producer refills it. A .release.cluster arrive first makes every earlier write
// of the thread visible cluster-wide (a MEMBAR): in the ping-pong pairs (matmul_forward_gelu 16)
// that stall was a fifth of all the warps' stalls under Nsight Compute and the kernel ran 1.7x
// as long as without pairs; at the block's scope, 1.02x (results/h100-session20-2026-12-06,
// calls 1-3).
__device__ __forceinline__ void mbar_arrive_in(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// The shared memory of a GemmRing: STAGES stages of A (128 x 64) then B (BN x 64), each
// 1024-aligned, then a full and an empty barrier a stage (and, with PINGPONG, the two turns): a
// launch asks for 1024 (slack for the alignment) + STAGES * STAGE + 16 * STAGES (+ 16) bytes, then
// the kernel's own, from end().
//
// The tiles: with T = cdiv(cdiv(M, 128), CLUSTER) * cdiv(N, BN) tile slots (count), block b's
// slots are p = b / CLUSTER, + gridDim.x / CLUSTER, ...; slot p's tile (origin) is row block
// p / tiles_n * CLUSTER + the block's rank, column block p % tiles_n. With CLUSTER = 1 a slot is
// a tile; with 2, a slot is a pair of tiles, the second past M where the row blocks are odd (its
// rows are zeros from the TMA and its stores are masked, so the pair's protocol still runs).
template <int BN, int STAGES, int CLUSTER = 1, int GROUP = 1, bool PINGPONG = false>
struct GemmRing {
    static constexpr int BM = 128, BK = 64;
    static constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE = A_BYTES + B_BYTES;
    static_assert(STAGE % 1024 == 0 && (B_BYTES / CLUSTER) % 1024 == 0, "stages (and B's halves) stay 1024-aligned");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "one block, or a pair");
    static constexpr int ARRIVALS = PINGPONG ? 4 : 8;  // consumer warps that release a stage (of a block)
    uint32_t base;  // the first stage's shared address
    __device__ __forceinline__ uint32_t a(int s) const { return base + s * STAGE; }
    __device__ __forceinline__ uint32_t b(int s) const { return base + s * STAGE + A_BYTES; }
    __device__ __forceinline__ uint32_t full(int s) const { return base + STAGES * STAGE + 8 * s; }
    __device__ __forceinline__ uint32_t empty(int s) const { return base + STAGES * STAGE + 8 * (STAGES + s); }
    // PINGPONG: the consumer warpgroups' turns (turn(w): warpgroup w may wait on its next tile's stages).
    __device__ __forceinline__ uint32_t turn(int w) const { return base + STAGES * STAGE + 16 * STAGES + 8 * w; }
    // The first byte past the ring (16-aligned): where a kernel's own shared memory may start.
    __device__ __forceinline__ uint32_t end() const { return base + STAGES * STAGE + 16 * STAGES + (PINGPONG ? 16 : 0); }

    static __device__ __forceinline__ int rank() { return CLUSTER == 1 ? 0 : (int)(blockIdx.x % CLUSTER); }
    static __device__ __forceinline__ int first() { return blockIdx.x / CLUSTER; }
    static __device__ __forceinline__ int stride() { return gridDim.x / CLUSTER; }
    static __device__ __forceinline__ int count(int M, int N) {
        return ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER * ((N + BN - 1) / BN);
    }
    static __device__ __forceinline__ void origin(int p, int M, int N, int& row0, int& col0) {
        const int tiles_n = (N + BN - 1) / BN;
        if constexpr (GROUP == 1) {
            row0 = (p / tiles_n * CLUSTER + rank()) * BM;
            col0 = p % tiles_n * BN;
        } else {  // groups of GROUP slot rows (row blocks, or pairs of them), each column block by column block
            const int slots_m = ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER, in_group = GROUP * tiles_n;
            const int top = p / in_group * GROUP, rows = min(GROUP, slots_m - top), r = p % in_group;
            row0 = ((top + r % rows) * CLUSTER + rank()) * BM;
            col0 = r / rows * BN;
        }
    }

    // Thread 0 initialises the barriers; every thread of the block must call this, once.
    __device__ __forceinline__ void init(uint32_t smem) {
        base = (smem + 1023) & ~1023u;
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full(s), 1);             // the producer's mbar_expect_tx
                mbar_init(empty(s), ARRIVALS * CLUSTER);  // one arrival per consumer warp (of the cluster) on it
            }
            if (PINGPONG) {
                mbar_init(turn(0), 1);  // the other warpgroup's first thread
                mbar_init(turn(1), 1);
            }
            mbar_init_fence();
        }
        __syncthreads();
        if (CLUSTER > 1) cluster_sync();
    }
    // Every thread of the block, last (with CLUSTER = 2: the blocks leave together).
    __device__ __forceinline__ void finish() const {
        if (CLUSTER > 1) cluster_sync();
    }

    // The producer (one thread): every k-step of every tile this block takes, in the consumers' order.
    __device__ __forceinline__ void produce(const TmaMap* ma, const TmaMap* mb, int M, int N, int K) {
        const int ksteps = (K + BK - 1) / BK;
        tensormap_acquire(ma);
        tensormap_acquire(mb);
        int it = 0;
        for (int p = first(); p < count(M, N); p += stride()) {
            int row0, col0;
            origin(p, M, N, row0, col0);
            for (int k = 0; k < ksteps; k++, it++) {
                const int s = it % STAGES, parity = ((it / STAGES) & 1) ^ 1;  // a fresh barrier's "previous" phase is done
                if (CLUSTER == 1)
                    mbar_wait(empty(s), parity);
                else
                    mbar_wait_cluster(empty(s), parity);
                mbar_expect_tx(full(s), STAGE);
                tma_load_2d(a(s), ma, k * BK, row0, full(s));
                if (CLUSTER == 1)
                    tma_load_2d(b(s), mb, k * BK, col0, full(s));
                else
                    tma_load_2d_multicast(b(s) + rank() * (B_BYTES / 2), mb, k * BK, col0 + rank() * (BN / 2), full(s),
                                          (uint16_t)3);
            }
        }
    }

    // A consumer warpgroup's product for one tile: d = rows 64 w .. 64 w + 63 of the tile's A B^T.
    // `it` counts the k-steps this block has consumed (the same count as the producer's).
    __device__ __forceinline__ void consume(float (&d)[BN / 2], int w, int K, int& it) const {
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t da = sw128_desc(a(s) + w * 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgmma_wide<BN>(d, da + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            wgmma_commit();
            if (k > 0) {
                wgmma_wait<1>();  // the previous k-step's products are done with its stage
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    // PINGPONG: consumer warpgroup w's product for its n-th tile (rows 0 .. 63 into lo, 64 .. 127
    // into hi), on that tile's stages alone: the block's tiles alternate between its two
    // warpgroups, so each skips the other's k-steps (the caller adds them to `it`).
    // The turns: a stage's `full` barrier tells apart only adjacent phases (parity), and a
    // warpgroup's next stages are a tile's worth of phases ahead of where the other warpgroup is.
    // So warpgroup w waits for its turn before its first wait on a stage (warpgroup 0's first tile
    // needs none), and hands the turn over once it has waited for its tile's last stage: by then
    // every stage has completed the phase before the ones the other warpgroup waits for.
    __device__ __forceinline__ void consume_tile(float (&lo)[BN / 2], float (&hi)[BN / 2], int K, int& it, int w,
                                                 int n) const {
        static_assert(PINGPONG, "a warpgroup a tile");
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        if (w == 1)
            mbar_wait(turn(1), n & 1);  // warpgroup 0 has waited for its n-th tile's stages
        else if (n > 0)
            mbar_wait(turn(0), (n - 1) & 1);  // warpgroup 1 has waited for its (n - 1)-th's
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t dlo = sw128_desc(a(s), 1024), dhi = sw128_desc(a(s) + 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                wgmma_wide<BN>(lo, dlo + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                wgmma_wide<BN>(hi, dhi + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            }
            wgmma_commit();
            if (k == ksteps - 1 && threadIdx.x % 128 == 0) mbar_arrive(turn(1 - w));  // the other's turn
            if (k > 0) {
                wgmma_wait<1>();
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    __device__ __forceinline__ void release(int s) const {
        mbar_arrive(empty(s));
        if (CLUSTER > 1) mbar_arrive_in(empty(s), rank() ^ 1);
    }
};
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_COMMON_GEMM_WGMMA_CUH

// ---- end gemm_wgmma.cuh ----   // GemmRing, TmaMap, tma_store_2d, bulk_*
// (already included: mma.cuh)          // pack_bf16x2, smem_addr

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Where the pair of accumulators (j, h) of row block `half` (64 rows each) goes in a staging area
// of boxes ROWS rows high.
template <int ROWS = 64>
__device__ __forceinline__ uint32_t staged_at(uint32_t area, int j, int h, int q, int g, int t, int half = 0) {
    const int r = 64 * half + 16 * q + g + 8 * h;
    return area + (j / 8) * (ROWS * 128) + r * 128 + (((j % 8) ^ g) << 4) + 4 * t;
}

// One output's boxes (ROWS x 64 each) from a staging area to rows row0 .. row0 + ROWS - 1, columns
// col0 .. col0 + BN - 1, as one bulk group (boxes wholly past M or N are not issued).
template <int BN, int ROWS = 64>
__device__ __forceinline__ void store_boxes(const TmaMap* map, uint32_t area, int row0, int col0, int M, int N) {
    if (row0 < M) {
#pragma unroll
        for (int b = 0; b < BN / 64; b++)
            if (col0 + 64 * b < N) tma_store_2d(map, col0 + 64 * b, row0, area + b * (ROWS * 128));
    }
    bulk_commit();
}

__device__ __forceinline__ void warpgroup_sync(int w) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory"); }

// Column pair j's bias (bx, by) added to its accumulators in both rows (in place), the sums staged as bf16.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_pair_with_bias(float (&d)[BN / 2], int j, float bx, float by, uint32_t area,
                                                     int half, int q, int g, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        d[4 * j + 2 * h] += bx;
        d[4 * j + 2 * h + 1] += by;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<ROWS>(area, j, h, q, g, t, half)),
                     "r"(pack_bf16x2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1])) : "memory");
    }
}

// The bias added to one row block's accumulators (in place) and the sums staged as bf16.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_with_bias(float (&d)[BN / 2], const bf16* bias, uint32_t area, int col0, int N,
                                                int half, int q, int g, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = col0 + 8 * j + 2 * t;
        const float2 b = c < N ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + c))
                               : make_float2(0.0f, 0.0f);
        stage_pair_with_bias<BN, ROWS>(d, j, b.x, b.y, area, half, q, g, t);
    }
}

// The bias pairs of a thread's columns (8 j + 2 t and 8 j + 2 t + 1 of the tile), packed bf16
// (zero past N): loaded before the tile's products, so that their latency hides under them.
template <int BN>
__device__ __forceinline__ void load_bias_pairs(uint32_t (&b)[BN / 8], const bf16* bias, int col0, int N, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = col0 + 8 * j + 2 * t;
        b[j] = c < N ? *reinterpret_cast<const uint32_t*>(bias + c) : 0u;
    }
}

// stage_with_bias with the bias pairs already in registers (load_bias_pairs).
template <int BN, int ROWS>
__device__ __forceinline__ void stage_with_bias_pairs(float (&d)[BN / 2], const uint32_t (&b)[BN / 8], uint32_t area,
                                                      int half, int q, int g, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
        stage_pair_with_bias<BN, ROWS>(d, j, __uint_as_float(b[j] << 16), __uint_as_float(b[j] & 0xffff0000u), area,
                                       half, q, g, t);
}

// One row block's packed pairs (word 2 j + h: the pair (d[4 j + 2 h], d[4 j + 2 h + 1])) staged.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_words(const uint32_t (&words)[BN / 4], uint32_t area, int half, int q, int g,
                                            int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<ROWS>(area, j, h, q, g, t, half)),
                         "r"(words[2 * j + h]) : "memory");
}

template <int BN, int STAGES, int BUFFERS, bool GELU, bool GIVE_REGS = false>
__device__ __forceinline__ void gemm_tma(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                         const TmaMap* map_pre, const bf16* bias, int M, int N, int K) {
    static_assert(BN % 64 == 0, "whole 64-column boxes");
    static_assert(BUFFERS == 1 || (GELU && BUFFERS == 2), "one staging area, or one an output");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, 1> ring;
    ring.init(smem_addr(smem4));
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        if constexpr (GIVE_REGS) setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        if constexpr (GIVE_REGS) setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;  // this warpgroup's stores go through its first thread
        const uint32_t staging = (ring.end() + 1023) & ~1023u;
        const uint32_t area_pre = staging + w * BUFFERS * BN * 128, area_out = area_pre + (BUFFERS - 1) * BN * 128;
        if (issuer) {
            tensormap_acquire(map_pre);
            if (GELU) tensormap_acquire(map_out);
        }
        float d[BN / 2];
        int it = 0;
        for (int p = ring.first(); p < ring.count(M, N); p += ring.stride()) {
            ring.consume(d, w, K, it);
            int row0, col0;
            ring.origin(p, M, N, row0, col0);
            row0 += 64 * w;
            if (issuer) bulk_wait_read<0>();  // the last tile's boxes have been read out
            warpgroup_sync(w);
            stage_with_bias<BN, 64>(d, bias, area_pre, col0, N, 0, q, g, t);
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN>(map_pre, area_pre, row0, col0, M, N);
            if constexpr (GELU) {
                // gelu(pre), packed, while pre's boxes go out (into registers of its own: written
                // into d, whose registers the next tile's wgmma own, ptxas serialises the wgmma, C7520)
                uint32_t gp[BN / 4];
#pragma unroll
                for (int i = 0; i < BN / 2; i += 2) gp[i / 2] = pack_bf16x2(gelu_tanh(d[i]), gelu_tanh(d[i + 1]));
                if (BUFFERS == 1) {
                    if (issuer) bulk_wait_read<0>();
                    warpgroup_sync(w);
                }
                stage_words<BN, 64>(gp, area_out, 0, q, g, t);
                fence_proxy_async();
                warpgroup_sync(w);
                if (issuer) store_boxes<BN>(map_out, area_out, row0, col0, M, N);
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}

// gemm_tma_pingpong<BN, STAGES, GROUP, GELU, EARLY_BIAS>: gemm_tma's product and outputs, each consumer
// warpgroup taking whole 128 x BN tiles, the block's tiles in turn (GemmRing's PINGPONG): while one
// warpgroup runs its epilogue the other's products keep the tensor cores busy, since the ring,
// filled in the block's tile order, hands a warpgroup its next tile's stages only as the other
// finishes with its own. A warpgroup holds 2 x BN / 2 accumulators (and, with GELU, BN / 2 packed
// words of gelu(pre)): more than 384 threads may have, so the producer warpgroup gives registers
// back (setmaxnreg: 40 for it, 232 for each consumer). Tiles go in groups of GROUP row blocks
// (GemmRing::origin). Maps of pre and out: box 128 x 64. EARLY_BIAS: each thread loads its
// columns' bias into registers before a tile's products (load_bias_pairs), not between the
// epilogue's staging stores. CLUSTER = 2: the kernel runs in clusters of two blocks
// (__cluster_dims__(2, 1, 1), an even grid) that take vertically adjacent tiles and share B's
// tiles by multicast (gemm_wgmma.cuh; map_b's box is then BN / 2 rows), GROUP counting pairs.
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 + 1024 + 2 * 128 * BN * 2.
template <int BN, int STAGES, int GROUP, bool GELU, bool EARLY_BIAS = false, int CLUSTER = 1>
__device__ __forceinline__ void gemm_tma_pingpong(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                                  const TmaMap* map_pre, const bf16* bias, int M, int N, int K) {
    static_assert(BN % 64 == 0, "whole 64-column boxes");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, CLUSTER, GROUP, true> ring;
    ring.init(smem_addr(smem4));
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;  // this warpgroup's stores go through its first thread
        const uint32_t area = ((ring.end() + 1023) & ~1023u) + w * 128 * BN * 2;
        if (issuer) {
            tensormap_acquire(map_pre);
            if (GELU) tensormap_acquire(map_out);
        }
        const int ksteps = (K + ring.BK - 1) / ring.BK;
        float lo[BN / 2], hi[BN / 2];
        int it = w * ksteps, n = 0;  // the block's k-steps before this warpgroup's first; its tiles so far
        for (int p = ring.first() + w * ring.stride(); p < ring.count(M, N); p += 2 * ring.stride(), n++) {
            int row0, col0;
            uint32_t bias_pairs[BN / 8];
            if constexpr (EARLY_BIAS) {
                ring.origin(p, M, N, row0, col0);
                load_bias_pairs<BN>(bias_pairs, bias, col0, N, t);
            }
            ring.consume_tile(lo, hi, K, it, w, n);
            it += ksteps;  // the other warpgroup's tile
            if constexpr (!EARLY_BIAS) ring.origin(p, M, N, row0, col0);
            if (issuer) bulk_wait_read<0>();  // the last tile's boxes have been read out
            warpgroup_sync(w);
            if constexpr (EARLY_BIAS) {
                stage_with_bias_pairs<BN, 128>(lo, bias_pairs, area, 0, q, g, t);
                stage_with_bias_pairs<BN, 128>(hi, bias_pairs, area, 1, q, g, t);
            } else {
                stage_with_bias<BN, 128>(lo, bias, area, col0, N, 0, q, g, t);
                stage_with_bias<BN, 128>(hi, bias, area, col0, N, 1, q, g, t);
            }
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN, 128>(map_pre, area, row0, col0, M, N);
            if constexpr (GELU) {
                uint32_t gp_lo[BN / 4], gp_hi[BN / 4];  // gelu(pre) packed, each row block's
#pragma unroll
                for (int i = 0; i < BN / 2; i += 2) {
                    gp_lo[i / 2] = pack_bf16x2(gelu_tanh(lo[i]), gelu_tanh(lo[i + 1]));
                    gp_hi[i / 2] = pack_bf16x2(gelu_tanh(hi[i]), gelu_tanh(hi[i + 1]));
                }
                if (issuer) bulk_wait_read<0>();
                warpgroup_sync(w);
                stage_words<BN, 128>(gp_lo, area, 0, q, g, t);
                stage_words<BN, 128>(gp_hi, area, 1, q, g, t);
                fence_proxy_async();
                warpgroup_sync(w);
                if (issuer) store_boxes<BN, 128>(map_out, area, row0, col0, M, N);
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}

template <bool TANH>
__device__ __forceinline__ float gelu_grad_of(float x) { return TANH ? gelu_grad_tanh(x) : gelu_grad(x); }

// One row block's dpre in place of its pre: the pre pair staged where the accumulator pair (j, h)
// goes (word k = 2 j + h) becomes gelu'(pre) * the pair, rounded to bf16, and cs[2 j + e] adds the
// rounded values (column 8 j + 2 t + e; the bias gradient sums dpre as it is written). Words go in
// batches of W: a batch's W loads, then its arithmetic, then its W stores. A load may not pass a
// store to the same memory, and the compiler cannot prove that the swizzled addresses differ, so
// with W = 1 each word's load waits for the last word's store and a warp's chain of 32 loads,
// gelu's and stores a row block runs at latency, not at throughput.
template <int BN, bool TANH, int W = 1>
__device__ __forceinline__ void dgelu_in_place(const float (&d)[BN / 2], uint32_t area, int half, int q, int g, int t,
                                               float (&cs)[BN / 4]) {
    static_assert((BN / 4) % W == 0, "whole batches");
#pragma unroll
    for (int k0 = 0; k0 < BN / 4; k0 += W) {
        uint32_t p[W];
#pragma unroll
        for (int i = 0; i < W; i++)
            asm volatile("ld.shared.u32 %0, [%1];\n"
                         : "=r"(p[i]) : "r"(staged_at<128>(area, (k0 + i) / 2, (k0 + i) % 2, q, g, t, half)) : "memory");
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int k = k0 + i;
            const float lo = gelu_grad_of<TANH>(__uint_as_float(p[i] << 16)) * d[2 * k];
            const float hi = gelu_grad_of<TANH>(__uint_as_float(p[i] & 0xffff0000u)) * d[2 * k + 1];
            p[i] = pack_bf16x2(lo, hi);
            cs[k & ~1] += __uint_as_float(p[i] << 16);
            cs[(k & ~1) + 1] += __uint_as_float(p[i] & 0xffff0000u);
        }
#pragma unroll
        for (int i = 0; i < W; i++)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<128>(area, (k0 + i) / 2, (k0 + i) % 2, q, g, t, half)),
                         "r"(p[i]) : "memory");
    }
}

// gemm_tma_dgelu<BN, STAGES, GROUP, TANH, W>(map_a, map_b, map_out, map_pre, partial, M, N, K): the GELU's
// backward on gemm_tma_pingpong's product. With D = A B^T (M x N): out = gelu'(pre) * D, rounded to
// bf16 (map_out), and partial[r * N + c] = the sum of out's rows 128 r .. 128 r + 127 in column c
// (fp32; one row of partials a row block, for the caller's column add).
// A warpgroup's tile: before its products, its first thread waits until the copy engine has read
// its last tile's boxes out of the warpgroup's staging area and asks the TMA for this tile's pre
// into it (map_pre: box 128 x 64, the staged layout itself), so the load runs under the products.
// Each thread then turns the pre pairs where its accumulator pairs go into dpre pairs (in place:
// each word is one thread's), the copy engine stores the boxes, and the column sums meet across the
// warp (shuffles over g) and the warpgroup's four warps (shared memory, in warp order): the same
// bits every run. TANH: gelu' through the hardware tanh (gelu.cuh's gelu_grad_tanh) instead of
// gelu_grad's exponential and reciprocal. W: the pre words dgelu_in_place loads before it
// computes and stores any of them (1: one word at a time). (In pairs of blocks, as
// gemm_tma_pingpong's CLUSTER = 2, it was no faster: results/h100-session20-2026-12-06/variants.)
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 + 1024 + 2 * 128 * BN * 2 + 2 * 4 * BN * 4.
template <int BN, int STAGES, int GROUP, bool TANH = false, int W = 1>
__device__ __forceinline__ void gemm_tma_dgelu(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                               const TmaMap* map_pre, float* partial, int M, int N, int K) {
    static_assert(BN % 64 == 0 && BN <= 128, "whole 64-column boxes; a column sum a thread");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, 1, GROUP, true> ring;
    ring.init(smem_addr(smem4));
    const uint32_t pre_full = ring.end();  // + 8 w: warpgroup w's pre has landed
    if (threadIdx.x == 0) {
        mbar_init(pre_full, 1);
        mbar_init(pre_full + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;
        const uint32_t staging = (ring.end() + 16 + 1023) & ~1023u, area = staging + w * 128 * BN * 2;
        const uint32_t sums = staging + 2 * 128 * BN * 2 + w * 4 * BN * 4;  // [warp][column] floats
        const uint32_t landed = pre_full + 8 * w;
        if (issuer) {
            tensormap_acquire(map_pre);
            tensormap_acquire(map_out);
        }
        const int ksteps = (K + ring.BK - 1) / ring.BK;
        float lo[BN / 2], hi[BN / 2];
        int it = w * ksteps, n = 0;
        for (int p = ring.first() + w * ring.stride(); p < ring.count(M, N); p += 2 * ring.stride(), n++) {
            int row0, col0;
            ring.origin(p, M, N, row0, col0);
            if (issuer) {
                bulk_wait_read<0>();  // the last tile's dpre has been read out of the area
                mbar_expect_tx(landed, 128 * BN * 2);
#pragma unroll
                for (int b = 0; b < BN / 64; b++) tma_load_2d(area + b * (128 * 128), map_pre, col0 + 64 * b, row0, landed);
            }
            ring.consume_tile(lo, hi, K, it, w, n);
            it += ksteps;
            mbar_wait(landed, n & 1);
            float cs[BN / 4];
#pragma unroll
            for (int i = 0; i < BN / 4; i++) cs[i] = 0.0f;
            dgelu_in_place<BN, TANH, W>(lo, area, 0, q, g, t, cs);
            dgelu_in_place<BN, TANH, W>(hi, area, 1, q, g, t, cs);
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN, 128>(map_out, area, row0, col0, M, N);
#pragma unroll
            for (int i = 0; i < BN / 4; i++) {
                float v = cs[i];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                if (g == 0)  // column 8 (i / 2) + 2 t + i % 2
                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sums + 4 * (q * BN + 8 * (i / 2) + 2 * t + i % 2)),
                                 "f"(v) : "memory");
            }
            warpgroup_sync(w);
            if (lane < BN && col0 + lane < N) {
                float s = 0.0f, v;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(sums + 4 * (k * BN + lane)) : "memory");
                    s += v;
                }
                partial[(size_t)(row0 / 128) * N + col0 + lane] = s;
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_COMMON_GEMM_TMA_CUH

// ---- end gemm_tma.cuh ----  // gemm_tma_dgelu: the ping-pong main loop (gemm_wgmma.cuh) and the dgelu epilogue

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

// ---- end 8_pingpong_dgelu_epilogue.cu ----

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

// ---- end 10_pingpong_dgelu_batched_loads.cu ----
// ---- begin column_parts.cuh ----
// column_parts.cuh: a block's 32 columns, each summed in eight parts, the parts added in a fixed order.
//
// add_eight_parts(mine, parts)
//   For a (32, 8) block: lane threadIdx.x owns column threadIdx.x of the block's 32, and
//   threadIdx.y says which eighth of the column's terms the thread has summed into `mine`
//   (e.g. rows threadIdx.y, threadIdx.y + 8, ... of a matrix of partial sums). Returns the
//   column's total, the eight parts added in order of threadIdx.y (the same bits every run), to
//   the threads with threadIdx.y == 0 (0 to the others). parts: 8 * 32 floats of shared memory.
//   Every thread of the block must call it (it holds a __syncthreads).
//   Used by matmul_backward_dgelu 11 (its slices' column sums) and qkv_bias_backward 2.

#ifndef KERNELS_COMMON_COLUMN_PARTS_CUH
#define KERNELS_COMMON_COLUMN_PARTS_CUH

__device__ __forceinline__ float add_eight_parts(float mine, float* parts) {
    parts[threadIdx.y * 32 + threadIdx.x] = mine;
    __syncthreads();
    float total = 0.0f;
    if (threadIdx.y == 0) {
#pragma unroll
        for (int p = 0; p < 8; p++) total += parts[p * 32 + threadIdx.x];
    }
    return total;
}

#endif  // KERNELS_COMMON_COLUMN_PARTS_CUH

// ---- end column_parts.cuh ----  // add_eight_parts

// dpre_bias[c] += the slices' sums of column c: lane threadIdx.x's column, threadIdx.y's eighth
// of the slices, the eighths added in order; rounded to bf16 once.
extern "C" __global__ void dgelu_bias_add11(bf16* dpre_bias, const float* partial, int C, int slices) {
    extern __shared__ float parts[];  // [8][32]
    const int c = blockIdx.x * 32 + threadIdx.x;
    float sum = 0.0f;
    if (c < C) {
        for (int k = threadIdx.y; k < slices; k += 8) sum += partial[(size_t)k * C + c];
    }
    const float total = add_eight_parts(sum, parts);
    if (threadIdx.y == 0 && c < C) dpre_bias[c] = to_bf16(to_float(dpre_bias[c]) + total);
}
