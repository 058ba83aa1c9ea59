/*
title = "bf16, 16-byte loads of eight values, the row held in registers as float"
precision = "bf16"
changed = "Version 8 with version 6's layout: each lane loads its share of the row as Pack8 (eight bf16 in 16 bytes) once, up front, and keeps it widened to float in registers; mean and variance come from registers; weight and bias are staged in shared memory as Pack8, once per block, while the rows' loads are in flight."
why = """
Version 8 reads the row three times with 2-byte loads: a warp's load instruction moves 64 bytes.
Here a warp's load moves 512 bytes (32 lanes x 16), an eighth of the instructions, and each lane
issues all of its C/256 loads before it waits for any, so a row of 768 is three 16-byte loads in
flight per lane. The row then crosses the memory bus once in and once out, the minimum: half of
version 6's bytes for the same structure. The two-pass variance is exact and costs no memory.
weight and bias are read by every row: each block copies them into shared memory once (Pack8,
4*C bytes; 32 lanes reading 32 consecutive packs is conflict-free), and each warp issues its
row's loads before that copy and its barrier, so their latencies overlap instead of adding up.
Registers hold the row widened to float (8 per pack), so the array needs a compile-time size:
one instantiation for rows up to 1024 (4 packs per lane, GPT-2's 768) and one up to 2048 (8
packs, GPT-2 XL's 1600); the launch picks one. Packs past the row are zeros and are never
stored.
"""
# Pack8 rows need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); the registers hold at most 2048 values per row.
preconditions = ["C % 8 == 0", "C <= 2048"]
block_sizes = [32, 64, 128, 256, 512]

[[launch]]
kernel = "layernorm_forward9_c1024"
when = "C <= 1024"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "layernorm_forward9_c2048"
when = "C > 1024"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/
// ---- begin layernorm_bf16.cuh ----
// layernorm_bf16.cuh: what the bf16 versions of the layernorm group (layernorm_forward,
// layernorm_backward, fused_residual_forward) share: widening a Pack8 to eight floats and
// rounding eight floats back, the statistics of a row a warp holds in registers, the normalization
// of one pack, and layernorm_backward's deterministic reduce of per-block fp32 partials.
//
// Shared because the fast bf16 versions of all three families hold a row the same way (each lane
// owns the packs k*32 + lane of its warp's row) and normalize it the same way; the reduce is the
// second kernel of every bf16 layernorm_backward version.
//
// unpack8(p, f) / pack8(f)
//   Eight bf16 widened exactly to float / eight floats rounded once to bf16 (nearest even, two
//   per conversion instruction on sm_80+).
//
// warp_row_stats<VEC>(v, C8, C, eps) -> (mean, rstd)
//   v[k][0..8) holds the lane's pack k*32 + lane of a row of C = 8 * C8 values, widened; slots
//   past the row (k*32 + lane >= C8) must hold zeros. mean, then the exact two-pass biased
//   variance from the registers, rstd = 1/sqrt(var + eps). Every lane gets both. All 32 lanes of
//   the warp must call (warp_sum).
//
// normalize8(x, mean, rstd, w, b) -> Pack8
//   (x - mean) * rstd * w + b in float for eight values, rounded once.
//
// stage_weight_bias(wb, weight, bias, C8)
//   The block copies weight's and bias's C8 packs into shared memory, wb[0, C8) and
//   wb[C8, 2*C8) (4*C bytes), then waits at a barrier: every thread of the block must call.
//
// layernorm_backward_reduce_partials(dweight, dbias, partial, G, C)
//   partial holds G rows of 2*C floats ([0, C) a block's dbias, [C, 2C) its dweight). Adds the
//   column sums into the bf16 dbias and dweight, in float, rounding once. Launch with
//   blockDim = (32, y), y <= 32 (32 columns a block, y partial rows in flight per column),
//   gridDim.x = cdiv(C, 32). The order of the additions depends only on G and blockDim: the
//   result is bitwise reproducible.

#ifndef KERNELS_COMMON_LAYERNORM_BF16_CUH
#define KERNELS_COMMON_LAYERNORM_BF16_CUH
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

// ---- end reduce.cuh ----

__device__ __forceinline__ void unpack8(const Pack8& p, float (&f)[8]) {
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = to_float(p.v[j]);
}

__device__ __forceinline__ Pack8 pack8(const float (&f)[8]) {
    Pack8 p;
    __nv_bfloat162* two = reinterpret_cast<__nv_bfloat162*>(p.v);
#pragma unroll
    for (int j = 0; j < 4; j++) two[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    return p;
}

template <int VEC>
__device__ __forceinline__ float2 warp_row_stats(const float (&v)[VEC][8], int C8, int C, float eps) {
    int lane = threadIdx.x % 32;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
#pragma unroll
        for (int j = 0; j < 8; j++) sum += v[k][j];  // padding slots hold zeros
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (k * 32 + lane < C8) {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = v[k][j] - m;
                sq += d * d;
            }
        }
    }
    return make_float2(m, rsqrtf(warp_sum(sq) / C + eps));
}

__device__ __forceinline__ Pack8 normalize8(const float (&x)[8], float m, float s, const Pack8& w,
                                            const Pack8& b) {
    float r[8];
#pragma unroll
    for (int j = 0; j < 8; j++) r[j] = (x[j] - m) * s * to_float(w.v[j]) + to_float(b.v[j]);
    return pack8(r);
}

__device__ __forceinline__ void stage_weight_bias(Pack8* wb, const bf16* weight, const bf16* bias, int C8) {
    for (int i = threadIdx.x; i < C8; i += blockDim.x) {
        wb[i] = load8(weight + 8 * i);
        wb[C8 + i] = load8(bias + 8 * i);
    }
    __syncthreads();
}

// Column c = blockIdx.x * 32 + threadIdx.x. Thread (x, y) sums partial rows y, y + blockDim.y,
// ...; then row 0 of the block adds the blockDim.y sums in y order and the result into the bf16
// gradient: a fixed order, no atomics, one rounding.
__device__ __forceinline__ void layernorm_backward_reduce_partials(bf16* dweight, bf16* dbias,
                                                                   const float* partial, int G, int C) {
    __shared__ float sums[2][32][32];  // blockDim.y <= 32
    int x = threadIdx.x, y = threadIdx.y;
    int c = blockIdx.x * 32 + x;
    float db = 0.0f, dw = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int g = y; g < G; g += blockDim.y) {  // unrolled: four independent loads in flight
            db += partial[(size_t)g * 2 * C + c];
            dw += partial[(size_t)g * 2 * C + C + c];
        }
    }
    sums[0][y][x] = db;
    sums[1][y][x] = dw;
    __syncthreads();
    if (y == 0 && c < C) {
        for (int k = 1; k < blockDim.y; k++) {
            db += sums[0][k][x];
            dw += sums[1][k][x];
        }
        dbias[c] = to_bf16(to_float(dbias[c]) + db);
        dweight[c] = to_bf16(to_float(dweight[c]) + dw);
    }
}

#endif  // KERNELS_COMMON_LAYERNORM_BF16_CUH

// ---- end layernorm_bf16.cuh ----  // Pack8 loads, unpack8, warp_row_stats, normalize8, stage_weight_bias

// VEC: packs per lane, so rows up to 256 * VEC values fit in registers.
template <int VEC>
__device__ void layernorm_rows_bf16(bf16* out, float* mean, float* rstd, const bf16* inp,
                                    const bf16* weight, const bf16* bias, int N, int C, float eps) {
    extern __shared__ Pack8 wb[];  // C/8 packs of weight, then C/8 of bias
    int C8 = C / 8;
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    bool live = row < N;  // the same for the whole warp
    const bf16* x = inp + (size_t)row * C;

    const Pack8 zero = {};
    Pack8 p[VEC];
#pragma unroll
    for (int k = 0; k < VEC; k++) {  // every load of the row is issued first, in flight while
        int i = k * 32 + lane;       // the block stages the weights and waits at the barrier
        p[k] = live && i < C8 ? load8_stream(x + 8 * i) : zero;
    }
    stage_weight_bias(wb, weight, bias, C8);
    if (!live) return;  // after the barrier: every thread helped stage the weights

    float v[VEC][8];
#pragma unroll
    for (int k = 0; k < VEC; k++) unpack8(p[k], v[k]);
    float2 stats = warp_row_stats<VEC>(v, C8, C, eps);
    if (lane == 0) {
        __stcs(mean + row, stats.x);
        __stcs(rstd + row, stats.y);
    }
    bf16* o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        if (i < C8) store8_stream(o + 8 * i, normalize8(v[k], stats.x, stats.y, wb[i], wb[C8 + i]));
    }
}

extern "C" __global__ void layernorm_forward9_c1024(bf16* out, float* mean, float* rstd,
                                                    const bf16* inp, const bf16* weight,
                                                    const bf16* bias, int N, int C, float eps) {
    layernorm_rows_bf16<4>(out, mean, rstd, inp, weight, bias, N, C, eps);
}

extern "C" __global__ void layernorm_forward9_c2048(bf16* out, float* mean, float* rstd,
                                                    const bf16* inp, const bf16* weight,
                                                    const bf16* bias, int N, int C, float eps) {
    layernorm_rows_bf16<8>(out, mean, rstd, inp, weight, bias, N, C, eps);
}
