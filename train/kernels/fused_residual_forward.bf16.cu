/*
title = "bf16: loads before the weight staging, each warp holding two rows: one normalized while the other is in flight"
precision = "bf16"
changed = "Version 5's persistent blocks, with the first two rows' loads of every warp issued before the block stages weight and bias (version 5 staged first, then loaded), and a two-row pipeline: each warp holds two rows of inp1 and inp2 in registers and refills a row's registers with its row two ahead as soon as that row is written, so one row is in flight while the other is reduced and written. Rows sit in registers as raw 32-bit words (stream_vec.cuh); the fp32 sums are formed where they are used."
why = """
At 8x1024x768 the op reads 25.2 MB (inp1, inp2) and writes 25.2 MB (residual, normed; plus 64 KB
of mean and rstd): version 5 takes 26.8-27.1 us against 25.5-25.9 us for a copy of the same
bytes (0.95x); fp32's version 3 reaches 0.97x. Two things cost version 5 time. (1) Every block
first copies weight and bias into shared memory and waits at a barrier, and only then issues
its first row's loads: at the start of the kernel that is a whole DRAM round trip (~1 us, the
weights are not yet in L2) with 132 SMs waiting on 3 KB and DRAM idle. (2) A warp loads a row,
then reduces and writes it with nothing in flight, then loads its next row: at 8x1024 (4224
warps, 8192 rows) most warps pay two full round trips in series, and the second batch of loads
starts only as the first batch's rows are finished.
Here each warp issues the loads of its first two rows (6 KB a warp at C = 768) before the block
stages the weights, so the staging's round trip overlaps them. The grid is one resident wave
(SMS x 768 threads: two rows of two inputs as words take ~80 registers, which the launch bounds
guarantee), so 24 warps an SM hold 144 KB in flight at the start and 3168 warps request three
quarters of the input at once; from then on, a warp that has written a row refills its
registers with its row two ahead before it touches the other row, so one row (72 KB an SM,
fp32 version 3's margin) is always in flight while the other is reduced and written, and the
pipeline never drains. The two buffers take turns (the loop is unrolled twice), since a
register copy of a row still in flight would wait for it. As in version 5, the statistics and
normed come from the fp32 sum inp1 + inp2, not from the rounded residual, and each output is
one rounding of an fp32 value; the variance is the exact two-pass one. Registers decided the
representation: as words (12 registers per row and input at C = 768) two rows fit beside each
other; as Pack8's 16-bit halves or as widened floats they spill. Wider rows keep the scheme at
lower occupancy: C <= 1024 at 512 threads an SM (128 registers), C <= 2048 at 256 (the rows in
flight per SM stay ~100 KB: fewer warps, wider rows).
Prediction: ~25.9 us at 8x1024x768, the copy's time within noise, from 26.8-27.1.
"""
# Rows of packs need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); the registers hold at most 2048 values per row.
preconditions = ["C % 8 == 0", "C <= 2048"]
# At most 256: the launch bounds (256 threads; 3, 2 or 1 blocks) cap the registers at 80, 128
# and 255, and a grid of whole blocks fills the 768, 512 or 256 threads an SM they allow.
block_sizes = [64, 128, 256]

[[launch]]
kernel = "fused_residual_forward6_c768"
when = "C <= 768"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (768 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "fused_residual_forward6_c1024"
when = "C > 768 and C <= 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (512 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "fused_residual_forward6_c2048"
when = "C > 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (256 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]
*/
// ---- begin reduce.cuh ----
// reduce.cuh: warp and block reductions of floats (sum and max).
//
// Shared because the same five-shuffle butterfly and the same two-level block reduction were
// written out in more than a dozen versions across seven families. The versions whose lesson is
// the reduction itself (layernorm_forward 5, softmax_forward 3 and 4, reduce 5, and
// matmul_backward_bias 2's inline loop) still write it out; every other version includes this
// header.
//
// warp_sum<LANES>(v), warp_max<LANES>(v)
//   An xor butterfly over aligned groups of LANES lanes (LANES a power of two <= 32; the default
//   is the whole warp). Every lane of a group gets the group's result. The shuffles use the full
//   mask: all 32 lanes of the warp must make the call (a warp may only leave early as a whole).
//
// block_sum(v), block_max(v)
//   Over every thread of the block: each warp reduces with warp_sum/warp_max, one shared slot per
//   warp, then warp 0 reduces the slots. Every thread gets the result.
//   * blockDim.x must be a multiple of 32 (full warps), at most 1024; every thread must call
//     (there are __syncthreads() inside: never call under a condition that splits the block).
//   * 33 floats of static shared memory (32 warp slots and the result), one buffer for both
//     functions; no dynamic shared memory, so a launch's `shared` does not change.
//   * The barrier after the warp step also orders every thread's earlier shared-memory writes
//     before anything after the call; the last barrier frees the slots, so calls may follow
//     each other directly.

#ifndef KERNELS_COMMON_REDUCE_CUH
#define KERNELS_COMMON_REDUCE_CUH

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// The two-level block reduction behind block_sum and block_max (is_max is a constant at every
// call site, so the unused branches compile away).
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float slots[33];  // [0, 32): one per warp; [32]: the result
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? slots[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) slots[32] = w;
    }
    __syncthreads();
    float result = slots[32];
    __syncthreads();  // the slots are free for the next call
    return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, false); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, true); }

#endif  // KERNELS_COMMON_REDUCE_CUH

// ---- end reduce.cuh ----      // warp_sum: every lane gets the warp's total
// ---- begin stream_vec.cuh ----
// stream_vec.cuh: eight bf16 held as four raw 32-bit words in registers, for the memory-bound
// bf16 versions that keep many 16-byte loads in flight per lane (encoder_forward 7,
// layernorm_forward 10, fused_residual_forward 6).
//
// Shared because those versions issue 6 to 12 loads of 16 bytes per lane before the first use,
// and how a pack sits in registers decides whether that fits. bf16.cuh's Pack8 is an array of
// eight 16-bit values: ptxas splits each loaded pack into 16-bit halves, and at 12 packs in
// flight per lane that took encoder_forward 7 from ~60 registers to 108 (spilling under its
// 64-register bound). A Word8 is the same 16 bytes as one int4, four 32-bit words; widening and
// rounding are a few integer operations on the words.
//
// Word8 (= int4): eight bf16, element 2j in the low half of word j, 2j+1 in the high half (the
//   memory order, little-endian). The same bytes as a Pack8.
// ld_word8(p), ld_word8_stream(p), st_word8_stream(p, w): one 16-byte access, plain (__ldg) or
//   streaming (__ldcs/__stcs: data touched once, evict first). p must be 16-byte aligned: an
//   element index that is a multiple of 8 from a cudaMalloc'd base.
// widen8(w, f): the eight values as floats, exactly (a bf16 is the top half of a float).
// round8(f) -> Word8: eight floats rounded once to bf16, nearest even (two per conversion
//   instruction on sm_80+; NaN stays NaN).

#ifndef KERNELS_COMMON_STREAM_VEC_CUH
#define KERNELS_COMMON_STREAM_VEC_CUH
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

// ---- end bf16.cuh ----

typedef int4 Word8;

__device__ __forceinline__ Word8 ld_word8(const bf16* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ Word8 ld_word8_stream(const bf16* p) { return __ldcs(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ void st_word8_stream(bf16* p, Word8 w) { __stcs(reinterpret_cast<int4*>(p), w); }

__device__ __forceinline__ void widen2(int word, float& lo, float& hi) {
    lo = __uint_as_float(unsigned(word) << 16);
    hi = __uint_as_float(unsigned(word) & 0xffff0000u);
}

__device__ __forceinline__ void widen8(Word8 w, float (&f)[8]) {
    widen2(w.x, f[0], f[1]);
    widen2(w.y, f[2], f[3]);
    widen2(w.z, f[4], f[5]);
    widen2(w.w, f[6], f[7]);
}

__device__ __forceinline__ int round2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    int word;
    memcpy(&word, &h, 4);
    return word;
}

__device__ __forceinline__ Word8 round8(const float (&f)[8]) {
    Word8 w;
    w.x = round2(f[0], f[1]);
    w.y = round2(f[2], f[3]);
    w.z = round2(f[4], f[5]);
    w.w = round2(f[6], f[7]);
    return w;
}

#endif  // KERNELS_COMMON_STREAM_VEC_CUH

// ---- end stream_vec.cuh ----  // Word8 (eight bf16 as an int4), ld/st_word8*, widen8, round8

// Issue the loads of `row` of both inputs (nothing when row >= N): pack k * 32 + lane of the
// row, zeros past its end.
template <int VEC>
__device__ __forceinline__ void issue_row(Word8 (&a)[VEC], Word8 (&b)[VEC], const bf16* inp1,
                                          const bf16* inp2, int row, int N, int C) {
    const Word8 zero = {0, 0, 0, 0};
    int C8 = C / 8, lane = threadIdx.x % 32;
    bool live = row < N;  // the same for the whole warp
    size_t offset = (size_t)(live ? row : 0) * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        a[k] = live && i < C8 ? ld_word8_stream(inp1 + offset + 8 * i) : zero;
        b[k] = live && i < C8 ? ld_word8_stream(inp2 + offset + 8 * i) : zero;
    }
}

// x = inp1 + inp2 of pack k, in fp32 (exact unless the exponents are more than 16 apart).
__device__ __forceinline__ void sum8(Word8 a, Word8 b, float (&x)[8]) {
    float y[8];
    widen8(a, x);
    widen8(b, y);
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] += y[j];
}

// Write residual, mean, rstd and normed of `row`, held in a and b (their loads issued earlier),
// then refill a and b with the loads of row `refill`.
template <int VEC>
__device__ __forceinline__ void finish_row(Word8 (&a)[VEC], Word8 (&b)[VEC], int row, int refill,
                                           bf16* residual, bf16* normed, float* mean, float* rstd,
                                           const bf16* inp1, const bf16* inp2, const int4* wb, int N,
                                           int C, float eps) {
    int C8 = C / 8, lane = threadIdx.x % 32;
    size_t offset = (size_t)row * C;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        float x[8];
        sum8(a[k], b[k], x);
#pragma unroll
        for (int j = 0; j < 8; j++) sum += x[j];  // padding packs: 0 + 0
        int i = k * 32 + lane;
        if (i < C8) st_word8_stream(residual + offset + 8 * i, round8(x));
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (k * 32 + lane < C8) {
            float x[8];
            sum8(a[k], b[k], x);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = x[j] - m;
                sq += d * d;
            }
        }
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);  // of the fp32 sums, not of the rounded residual
    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        if (i < C8) {
            float x[8], w[8], c[8];
            sum8(a[k], b[k], x);
            widen8(wb[i], w);
            widen8(wb[C8 + i], c);
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = (x[j] - m) * s * w[j] + c[j];
            st_word8_stream(normed + offset + 8 * i, round8(x));
        }
    }
    issue_row(a, b, inp1, inp2, refill, N, C);
}

// VEC: packs per lane (rows up to 256 * VEC values). Each warp holds two rows (of both inputs) in
// registers: one is normalized while the other is in flight. The two buffers take turns (the
// loop is unrolled twice), so no register copy ever waits on a load still in flight.
template <int VEC>
__device__ __forceinline__ void fused_rows(bf16* residual, bf16* normed, float* mean, float* rstd,
                                           const bf16* inp1, const bf16* inp2, const bf16* weight,
                                           const bf16* bias, int N, int C, float eps) {
    extern __shared__ int4 wb[];  // C/8 words of weight, then C/8 of bias
    int C8 = C / 8;
    int warps = gridDim.x * (blockDim.x / 32);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the same for the whole warp
    Word8 a0[VEC], b0[VEC], a1[VEC], b1[VEC];
    issue_row(a0, b0, inp1, inp2, row, N, C);  // the first two rows fly while the weights are staged
    issue_row(a1, b1, inp1, inp2, row + warps, N, C);
    for (int i = threadIdx.x; i < C8; i += blockDim.x) {
        wb[i] = ld_word8(weight + 8 * i);
        wb[C8 + i] = ld_word8(bias + 8 * i);
    }
    __syncthreads();  // every thread, before any leaves: the loop below has no barrier
    for (; row < N; row += 2 * warps) {
        finish_row(a0, b0, row, row + 2 * warps, residual, normed, mean, rstd, inp1, inp2, wb, N, C, eps);
        if (row + warps >= N) break;
        finish_row(a1, b1, row + warps, row + 3 * warps, residual, normed, mean, rstd, inp1, inp2, wb, N, C, eps);
    }
}

// The grids assume 768 (c768), 512 (c1024) and 256 (c2048) resident threads an SM: the launch
// bounds hold the registers to 80, 128 and 255 so that they are (a block that is not resident
// would run as a second, mostly empty wave).
extern "C" __global__ void __launch_bounds__(256, 3)
fused_residual_forward6_c768(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                             const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<3>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 2)
fused_residual_forward6_c1024(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                              const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<4>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 1)
fused_residual_forward6_c2048(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                              const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<8>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}
