/*
title = "bf16, 16-byte loads of eight values, the row in registers, per-warp fp32 column sums"
precision = "bf16"
changed = "Version 5's structure in bf16: each lane loads its Pack8 share of dout, inp and dinp once, all up front, and keeps them in registers; per-warp fp32 column sums in shared memory; fp32 per-block partials and the reduce kernel as in version 6."
why = """
Version 6 moves 2-byte values (64 bytes per warp load), reads each row twice and reduces with
the whole block. Here a warp owns a row: its 32 lanes load eight values per 16-byte access, a
warp's load moves 512 bytes, and each lane issues all of its loads of the three rows it needs
(dout, inp and the dinp it adds to: C/256 packs each) before it waits on any, so dout and inp
cross the memory bus once and dinp once each way: the minimum, at half of version 5's bytes
(version 5 loads dinp only in its second loop; here its 16-byte loads are in flight with the
others, which the halved register cost of a bf16 row affords). weight is read per row with
16-byte loads that hit L1: every warp of the SM reads the same 2*C bytes.
Column sums stay fp32 (see version 6): each warp adds its rows' dout and dout * xhat into a
private fp32 row of shared memory, in which each lane owns its columns (no races, row order);
a pack's eight columns are kept as two float4 in two separate arrays, so a warp's 32 float4
accesses are consecutive, conflict-free. The block then sums its warps in warp order into one
fp32 partial, and the reduce kernel adds the partials in a fixed order and rounds into dweight
and dbias once: bitwise reproducible. Two instantiations (rows up to 1024 and up to 2048); the
launch bounds keep them resident at the grid's 512 and 256 threads per SM.
"""
# Pack8 rows need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); registers hold at most 2048 values a row, and the warps' fp32 slices take
# block_size/32 * 8*C bytes of shared memory (128 KB at C = 2048 and 256 threads).
preconditions = ["C % 8 == 0", "C <= 2048"]
block_sizes = [64, 128, 256]

[derived]
groups = "min(cdiv(N, block_size // 32), SMS * cdiv(512 if C <= 1024 else 256, block_size))"  # one wave at most

[scratch]
partial = "2 * C * groups"

[[launch]]
kernel = "layernorm_backward7_c1024"
when = "C <= 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward7_c2048"
when = "C > 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward_reduce_bf16"
grid = "cdiv(C, 32)"
block = [32, 32]
args = ["dweight", "dbias", "partial", "groups", "C"]
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

// ---- end layernorm_bf16.cuh ----  // Pack8 loads, unpack8/pack8, warp_sum, the partials' reduce

// a + v[4h .. 4h+4)
__device__ __forceinline__ float4 plus4(float4 a, const float (&v)[8], int h) {
    return make_float4(a.x + v[4 * h], a.y + v[4 * h + 1], a.z + v[4 * h + 2], a.w + v[4 * h + 3]);
}

// VEC: packs per lane, so rows up to 256 * VEC values fit in registers.
// A warp's slice: four arrays of C/8 float4, [0] and [1] the dbias of columns 8i..8i+3 and
// 8i+4..8i+7 of pack i, [2] and [3] the same for dweight.
// partial: gridDim.x rows of 2*C floats, [0, C) the block's dbias, [C, 2C) its dweight.
template <int VEC>
__device__ void layernorm_backward_rows_bf16(bf16* dinp, float* partial, const bf16* dout,
                                             const bf16* inp, const bf16* weight, const float* mean,
                                             const float* rstd, int N, int C) {
    extern __shared__ float4 slices4[];  // warps x 4 * C/8 float4
    int C8 = C / 8;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < warps * 4 * C8; i += blockDim.x) slices4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    float4* acc = slices4 + (size_t)warp * 4 * C8;

    const Pack8 zero = {};

    // The loop bound is the same for all lanes of a warp, so the shuffles see all 32 lanes.
    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        size_t offset = (size_t)row * C;
        Pack8 gp[VEC], xp[VEC], dp[VEC];  // dout, inp, dinp: every load issued before any use
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            gp[k] = i < C8 ? load8_stream(dout + offset + 8 * i) : zero;
            xp[k] = i < C8 ? load8_stream(inp + offset + 8 * i) : zero;
            dp[k] = i < C8 ? load8_stream(dinp + offset + 8 * i) : zero;
        }
        float m = mean[row], s = rstd[row];

        float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            if (k * 32 + lane < C8) {
                float g[8], x[8], w[8];
                unpack8(gp[k], g);
                unpack8(xp[k], x);
                unpack8(load8(weight + 8 * (k * 32 + lane)), w);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float dn = w[j] * g[j];
                    sum_dn += dn;
                    sum_dnx += dn * ((x[j] - m) * s);
                }
            }
        }
        float mean_dn = warp_sum(sum_dn) / C;
        float mean_dnx = warp_sum(sum_dnx) / C;

#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            if (i < C8) {
                float g[8], x[8], w[8], d[8], gx[8];
                unpack8(gp[k], g);
                unpack8(xp[k], x);
                unpack8(load8(weight + 8 * i), w);
                unpack8(dp[k], d);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float xhat = (x[j] - m) * s;
                    d[j] += s * (w[j] * g[j] - mean_dn - xhat * mean_dnx);
                    gx[j] = g[j] * xhat;
                }
                store8_stream(dinp + offset + 8 * i, pack8(d));
                acc[i] = plus4(acc[i], g, 0);
                acc[C8 + i] = plus4(acc[C8 + i], g, 1);
                acc[2 * C8 + i] = plus4(acc[2 * C8 + i], gx, 0);
                acc[3 * C8 + i] = plus4(acc[3 * C8 + i], gx, 1);
            }
        }
    }
    __syncthreads();  // every warp's slice is final

    // Sum the warps' slices in warp order; array a's float4 i holds columns 8i + 4(a%2) .. +3
    // of dbias (a < 2) or dweight: float4 (a/2) * C/4 + 2i + a%2 of the partial row.
    float4* mine = reinterpret_cast<float4*>(partial) + (size_t)blockIdx.x * 4 * C8;
    for (int e = threadIdx.x; e < 4 * C8; e += blockDim.x) {
        float4 sum = slices4[e];
        for (int w = 1; w < warps; w++) {
            float4 t = slices4[(size_t)w * 4 * C8 + e];
            sum = make_float4(sum.x + t.x, sum.y + t.y, sum.z + t.z, sum.w + t.w);
        }
        int a = e / C8, i = e % C8;
        mine[(a / 2) * 2 * C8 + 2 * i + a % 2] = sum;
    }
}

// The grid assumes 512 (c1024) and 256 (c2048) resident threads per SM: the launch bounds hold
// the registers to 128 and 255 so that they are.
extern "C" __global__ void __launch_bounds__(256, 2)
layernorm_backward7_c1024(bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                          const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows_bf16<4>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(256, 1)
layernorm_backward7_c2048(bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                          const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows_bf16<8>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void layernorm_backward_reduce_bf16(bf16* dweight, bf16* dbias,
                                                          const float* partial, int G, int C) {
    layernorm_backward_reduce_partials(dweight, dbias, partial, G, C);
}
