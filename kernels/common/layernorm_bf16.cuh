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

#include "bf16.cuh"
#include "reduce.cuh"

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
