// layernorm_backward_rows.cuh: the one pass over the rows that layernorm_backward versions 10
// (fp32) and 11 (bf16) share: dinp += its row formula, and each block's column sums of dout and
// dout * xhat handed out, one float per column, for the version to add into dbias and dweight.
//
// Shared because the two versions differ only in the width of a 16-byte pack (4 floats or 8 bf16)
// and in where a block's column sums go (fp32: atomics into dweight and dbias; bf16: atomics into
// an fp32 accumulator, then one rounding by the last block). Version 10's header tells the design.
//
// Pack16<T>: T's 16-byte pack (float4 or Pack8), its width P (4 or 8); load16 / load16_stream /
// store16_stream move one pack, widen16 / the store narrow it to and from P floats (bf16: exact
// widening, one rounding to nearest even on the way back).
//
// layernorm_backward_rows<T, VEC, WPR, PREFETCH>(dinp, dout, inp, weight, mean, rstd, N, C, smem,
//                                               add_total)
//   * A row of C values is C/P packs. Each lane holds VEC packs of a row; the versions use
//     VEC * P = 24 values, so a warp covers 768 columns and a row takes WPR = cdiv(C, 768) warps
//     (a compile-time 1, 2 or 3: with it known the pack offsets are immediates, which keeps the
//     kernels inside 168 registers). Lane `lane` of part q (0 <= q < WPR) of a row's warps owns
//     packs k * 32 * WPR + 32 * q + lane, k < VEC: the same columns in every row, so its dbias and
//     dweight sums (2 * VEC * P floats) stay in registers for the whole kernel.
//   * Warp w of the block works on row slot w / WPR (slots = warps / WPR; a leftover warp idles).
//     Round i, slot s of block b takes row i * gridDim.x * slots + b * slots + s: each round the
//     grid covers one contiguous band of rows. Every block runs the same number of rounds
//     (cdiv(N, gridDim.x * slots)), so the barrier inside a round (WPR > 1 only) is reached by all.
//   * PREFETCH: the next row's dout, inp and dinp are loaded before the current row is worked on
//     (twice the row registers).
//   * smem: dynamic shared memory of 4 * (128 + 2 * C * slots) bytes, 16-byte aligned: [0, 128)
//     floats for the WPR > 1 row sums (two rounds' worth, so one barrier a round suffices), then
//     slots rows of 2 * C floats for the block's column sums. Passed in because the kernel's file
//     declares its extern __shared__ array.
//   * add_total(e, total) is called once for every e in [0, 2C) by one thread of the block, after
//     the block's rows are done: e < C is column e of dbias's sum, e >= C column e - C of
//     dweight's. total adds the block's slots in slot order. Threads take e = threadIdx.x,
//     threadIdx.x + blockDim.x, ...: consecutive threads, consecutive columns.
//   * Preconditions: C % P == 0 (16-byte aligned rows), C <= 32 * VEC * P * WPR, blockDim.x a
//     multiple of 32 with at least WPR warps and at most 32 (the row sums' slots). Every thread
//     of the block must call (barriers).

#ifndef KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH
#define KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH

#include "bf16.cuh"
#include "reduce.cuh"

template <class T> struct Pack16;
template <> struct Pack16<float> {
    typedef float4 type;
    static constexpr int P = 4;
};
template <> struct Pack16<bf16> {
    typedef Pack8 type;
    static constexpr int P = 8;
};

__device__ __forceinline__ float4 load16(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ Pack8 load16(const bf16* p) { return load8(p); }
__device__ __forceinline__ float4 load16_stream(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ Pack8 load16_stream(const bf16* p) { return load8_stream(p); }

__device__ __forceinline__ void widen16(const float4& v, float (&f)[4]) {
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}
// bf16 is the top half of a float: widening is a shift or a mask of each 32-bit word (value 2i
// is the low half of word i). Done on words, not on the bf16 fields, so that the compiler keeps
// the packs in 32-bit registers (on the fields it moved 16-bit halves and spilled them).
__device__ __forceinline__ void widen16(const Pack8& v, float (&f)[8]) {
    const unsigned* u = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void store16_stream(float* p, const float (&f)[4]) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(f[0], f[1], f[2], f[3]));
}
__device__ __forceinline__ void store16_stream(bf16* p, const float (&f)[8]) {
    Pack8 out;
    __nv_bfloat162* two = reinterpret_cast<__nv_bfloat162*>(out.v);
#pragma unroll
    for (int j = 0; j < 4; j++) two[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    store8_stream(p, out);
}

// One row's share of a lane: its VEC packs of dout, inp and dinp, and the row's mean and rstd.
// Packs past the row and rows past N are zeros (m = s = 0): they add nothing to any sum.
template <class T, int VEC>
struct RowShare {
    typename Pack16<T>::type g[VEC], x[VEC], d[VEC];
    float m, s;

    __device__ __forceinline__ void load(const T* dout, const T* inp, const T* dinp, const float* mean,
                                         const float* rstd, int row, bool valid, int first, int step,
                                         int CP, int C) {
        constexpr int P = Pack16<T>::P;
        const typename Pack16<T>::type zero = {};
        size_t offset = (size_t)row * C;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int p = k * step + first;
            bool ok = valid && p < CP;
            g[k] = ok ? load16_stream(dout + offset + (size_t)p * P) : zero;
            x[k] = ok ? load16_stream(inp + offset + (size_t)p * P) : zero;
            d[k] = ok ? load16_stream(dinp + offset + (size_t)p * P) : zero;
        }
        m = valid ? mean[row] : 0.0f;
        s = valid ? rstd[row] : 0.0f;
    }
};

template <class T, int VEC, int WPR, bool PREFETCH, class AddTotal>
__device__ __forceinline__ void layernorm_backward_rows(T* dinp, const T* dout, const T* inp,
                                                        const T* weight, const float* mean,
                                                        const float* rstd, int N, int C, float* smem,
                                                        AddTotal add_total) {
    constexpr int P = Pack16<T>::P;
    typedef typename Pack16<T>::type Pack;
    const Pack zero = {};
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int CP = C / P;
    const int slots = warps / WPR, slot = warp / WPR;
    const bool active = slot < slots;
    const int first = (warp % WPR) * 32 + lane, step = 32 * WPR;
    const int band = gridDim.x * slots;  // rows a round
    const int rounds = (N + band - 1) / band;
    float2* row_sums = reinterpret_cast<float2*>(smem);  // [2 rounds][32 warps]
    float* block_sums = smem + 128;                      // [slots][2C]

    float acc_db[VEC][P], acc_dw[VEC][P];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
#pragma unroll
        for (int j = 0; j < P; j++) acc_db[k][j] = acc_dw[k][j] = 0.0f;
    }

    int row = blockIdx.x * slots + slot;
    RowShare<T, VEC> cur;
    cur.load(dout, inp, dinp, mean, rstd, row, active && row < N, first, step, CP, C);
    for (int round = 0; round < rounds; round++, row += band) {
        RowShare<T, VEC> next;
        if constexpr (PREFETCH) {
            int r = row + band;
            next.load(dout, inp, dinp, mean, rstd, r, active && r < N, first, step, CP, C);
        }
        const bool valid = active && row < N;  // the same for the whole warp
        const float m = cur.m, s = cur.s;

        // The row's two sums: of dnorm = weight * dout, and of dnorm * xhat.
        float sum_dn = 0.0f, sum_dnx = 0.0f;
        if (valid) {
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                int p = k * step + first;
                float g[P], x[P], w[P];
                widen16(cur.g[k], g);
                widen16(cur.x[k], x);
                widen16(p < CP ? load16(weight + (size_t)p * P) : zero, w);
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float dn = w[j] * g[j];
                    sum_dn += dn;
                    sum_dnx += dn * ((x[j] - m) * s);
                }
            }
        }
        sum_dn = warp_sum(sum_dn);
        sum_dnx = warp_sum(sum_dnx);
        if (WPR > 1) {  // a row spans WPR warps: add their sums, in part order, in every one of them
            float2* mine = row_sums + (round & 1) * 32;
            if (lane == 0) mine[warp] = make_float2(sum_dn, sum_dnx);
            __syncthreads();
            if (active) {
                sum_dn = sum_dnx = 0.0f;
                for (int q = 0; q < WPR; q++) {
                    float2 t = mine[slot * WPR + q];
                    sum_dn += t.x;
                    sum_dnx += t.y;
                }
            }
        }
        const float mean_dn = sum_dn / C, mean_dnx = sum_dnx / C;

        if (valid) {
            size_t offset = (size_t)row * C;
            // No branch around a pack's work (packs past the row hold zeros and add nothing),
            // only around its store: the compiler may then issue all the weight loads at once.
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                int p = k * step + first;
                float g[P], x[P], w[P], d[P];
                widen16(cur.g[k], g);
                widen16(cur.x[k], x);
                widen16(cur.d[k], d);
                widen16(p < CP ? load16(weight + (size_t)p * P) : zero, w);
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float xhat = (x[j] - m) * s;
                    d[j] += s * (w[j] * g[j] - mean_dn - xhat * mean_dnx);
                    acc_db[k][j] += g[j];
                    acc_dw[k][j] += g[j] * xhat;
                }
                if (p < CP) store16_stream(dinp + offset + (size_t)p * P, d);
            }
        }

        if constexpr (PREFETCH) {
            cur = next;
        } else if (round + 1 < rounds) {
            int r = row + band;
            cur.load(dout, inp, dinp, mean, rstd, r, active && r < N, first, step, CP, C);
        }
    }

    // The block's column sums: each slot's row of 2C floats, written by the lanes that own the
    // columns (float4 stores, consecutive lanes consecutive addresses), then added in slot order.
    if (active) {
        float* mine = block_sums + (size_t)slot * 2 * C;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int p = k * step + first;
            if (p < CP) {
#pragma unroll
                for (int h = 0; h < P / 4; h++) {
                    const float* db = acc_db[k] + 4 * h;
                    const float* dw = acc_dw[k] + 4 * h;
                    reinterpret_cast<float4*>(mine + p * P)[h] = make_float4(db[0], db[1], db[2], db[3]);
                    reinterpret_cast<float4*>(mine + C + p * P)[h] = make_float4(dw[0], dw[1], dw[2], dw[3]);
                }
            }
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 2 * C; e += blockDim.x) {
        float total = 0.0f;
        for (int s = 0; s < slots; s++) total += block_sums[(size_t)s * 2 * C + e];
        add_total(e, total);
    }
}

#endif  // KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH
