/*
title = "bf16: a plain tuned GEMM, then gelu' applied in place in the pass that takes the column sums"
builds_on = 6
precision = "bf16"
changed = "The input gradient's GEMM has no epilogue: cuBLASLt writes dout @ weight (rounded to bf16) into dpre, its algorithm chosen by timing as in version 6. One kernel then reads that and pre, writes dpre = gelu'(pre) * it in place and sums the dpre it wrote into version 5's column partials; version 5's slice add and version 6's weight gradient follow unchanged."
why = """
In the B = 16 step on an H200 (results/h200-session13-2026-12-01/call4) the DGELU GEMM is one
of cuBLASLt's older sm90_xmma kernels (128x128 tiles, no overlapped epilogue): 159 us a layer
for 77 GFLOP, ~490 TFLOP/s, where plain GEMMs of the same size run nvjet kernels at 740 or more.
Without the epilogue the GEMM can take those. The price is bytes: the GEMM writes 2 bytes an
element, and the column-sum pass, which read dpre (2 bytes), now reads the GEMM's output and pre
and writes dpre (6 bytes): 300 MB a layer at B = 16 instead of 100, ~50 us more at the copy's
speed, against the ~55 us the GEMM should gain. This version measures whether that trade wins.
Numerically it is the unfused trainer's order (matmul_backward rounds dout @ weight to bf16, then
gelu_backward rounds the product): two roundings of dpre where version 6 has one.
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
dtype = "bf16"
tune = 8

[[launch]]
kernel = "dgelu_in_place_partials7"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "pre", "N", "C", "ROWS"]

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

#endif  // KERNELS_COMMON_GELU_CUH

// ---- end gelu.cuh ----  // gelu_grad

// One row's eight columns: dpre (holding dout @ weight) becomes gelu'(pre) * dpre, rounded to
// bf16 and stored back; the rounded values are what the column sums add (the bias gradient of the
// dpre every later call reads).
__device__ __forceinline__ void dgelu_pack7(float (&s)[8], bf16* at, const Pack8& g, const Pack8& p) {
    Pack8 d;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        d.v[j] = to_bf16(gelu_grad(to_float(p.v[j])) * to_float(g.v[j]));
        s[j] += to_float(d.v[j]);
    }
    store8(at, d);
}

// partial[s * C + c] = the sum over the rows of slice s of the new dpre[row, c], in fp32, as
// dgelu_column_partials5 takes it (the same grid, the same row order within a warp), with each
// row's dpre made first: a block holds 256 columns (eight a thread, C % 8 == 0), its eight warps
// take every eighth row of the slice, and a warp loads four rows of both inputs before it works on
// any. Each element is read and written by the one thread that owns it, so in place is safe.
extern "C" __global__ void dgelu_in_place_partials7(float* partial, bf16* dpre, const bf16* pre, int N, int C,
                                                    int rows) {
    __shared__ float sums[8][32][8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int c = blockIdx.x * 256 + 8 * lane;
    const int r0 = blockIdx.y * rows, r1 = min(N, r0 + rows);
    float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (c < C) {
        int r = r0 + warp;
        for (; r + 24 < r1; r += 32) {
            Pack8 g[4], p[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const size_t at = (size_t)(r + 8 * u) * C + c;
                g[u] = load8(dpre + at);
                p[u] = load8(pre + at);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) dgelu_pack7(s, dpre + (size_t)(r + 8 * u) * C + c, g[u], p[u]);
        }
        for (; r < r1; r += 8) {
            const size_t at = (size_t)r * C + c;
            dgelu_pack7(s, dpre + at, load8(dpre + at), load8(pre + at));
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
