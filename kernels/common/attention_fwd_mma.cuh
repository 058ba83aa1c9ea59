// attention_fwd_mma.cuh: the warp-level pieces of a bf16 flash-attention forward in which a warp
// owns MT m-tiles of 16 query rows (MT = 1 or 2) and every K / V fragment fetched with ldmatrix
// feeds MT mma instructions; and the P V product can lag the scores by one key tile.
//
// Shared so that a later forward (another tile shape, or the backward's recomputation of P) can
// reuse the fragment maps; attention_forward 10 is their first user. The instructions and their
// fragment layouts are in mma.cuh; the maps below are version 8's (attention_forward
// 8_flash_mma_bf16.cu tells them element by element), generalised to MT m-tiles. No inline PTX
// but mma.cuh's wrappers (and no blockIdx), so the CPU emulator (tests/gpu_emu) runs it as is.
//
// Layouts (g = lane / 4, t = lane % 4):
//   s[mt][n][e]  score of row row0 + 16 mt + g + 8 (e / 2) and key key0 + 8 n + 2 t + (e % 2),
//                for NT = 8 n-tiles of 8 keys (a 64-key tile).
//   o[mt][n][e]  output of the same row and channel 8 n + 2 t + (e % 2), DT = HSP / 8 n-tiles.
//   p[mt][kk][4] the probabilities of keys 16 kk .. 16 kk + 15 as P V's A fragment, bf16 pairs:
//                { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] }.
//   m[mt][r], l[mt][r]  row r (0: g, 1: g + 8) of m-tile mt: the softmax's reference point (a
//                past running maximum, see softmax_tile), kept already scaled (score x sl,
//                sl = log2(e) / sqrt(HS)), and this lane's share of the row sum of 2^(s sl - m).
// Shared-memory tiles: rows of S = HSP + 8 bf16 (HSP + 16 bytes: a 16-mod-128-byte stride, so the
// 8 row addresses of one ldmatrix matrix fall in 8 different 16-byte bank groups).
//
// stage_rows<ROWS, HSP, S, THREADS, ASYNC>(dst, src, row_stride, rows_left, HS)
//   dst[r * S + d] = src[r * row_stride + d] for r < ROWS, d < HSP, zeros where r >= rows_left or
//   d >= HS (zero keys score 0 and zero values add nothing; never NaN). ASYNC: 16-byte cp.async
//   (zero-filled, no read, where invalid; the caller commits and waits), needs HS % 8 == 0 and
//   16-byte aligned rows. Else element by element, synchronously (any HS).
// TilePieces<HSP, S, THREADS>: the same ASYNC copy of a whole 64-row tile with the thread's part of
//   the addresses computed once (see below).
// k_lane<S>(tile), v_lane<S>(tile): this lane's ldmatrix row address in a K / V tile (shared space).
// q_fragments<MT, KT, S>(qf, q_rows): the warp's Q A-fragments, q_rows = its first Q row in shared.
// qk<MT, KT, S>(s, qf, k): s = Q K^T for one 64-key tile (set, not accumulated).
// q_lane<S>(q_rows), qk_smem<MT, KT, S>(s, q, k): the same product with the Q fragments read from
//   shared memory (q = q_lane of the warp's first Q row), one 16-channel step at a time: 8
//   registers for Q instead of 32 (MT = 2), MT ldmatrix more per step.
// mask_causal<MT>(s, key0, row0): s = -inf where key > row.
// softmax_tile<MT>(s, p, m, l, alpha, sl, slack): folds the tile into m and l; p = 2^(s sl - m_new)
//   packed to bf16; alpha = 2^(m_old - m_new), by which the caller must rescale o (after adding
//   any P V computed against m_old). m is a reference point, not always the maximum: it moves (to
//   the running maximum) only when a tile's maximum exceeds it by more than slack (0: on every
//   increase), so p <= 2^slack. Returns whether any of this lane's rows moved (alpha != 1): if
//   none did, o needs no rescaling. s is consumed. The final out = o / l and
//   lse = m + log2(l) are exact for any reference point.
// pv<MT, DT, S>(o, p, v): o += P V for one 64-key tile.
// rescale<MT, DT>(o, alpha): o *= alpha, row by row.
// store_rows<MT, PAIRS>(out, lse, o, m, l, row0, b, h, T, NH, HS): the epilogue: the row sums over
//   the 4 lanes, lse = ln sum exp(score / sqrt(HS)) (fp32, lane t == 0), out = o / sum (bf16;
//   PAIRS: two channels in one 4-byte store, needs HS even). Rows >= T are skipped. All 32 lanes
//   must call (shuffles).

#ifndef KERNELS_COMMON_ATTENTION_FWD_MMA_CUH
#define KERNELS_COMMON_ATTENTION_FWD_MMA_CUH

#include <stdint.h>

#include "bf16.cuh"
#include "mma.cuh"
#include "reduce.cuh"

template <int ROWS, int HSP, int S, int THREADS, bool ASYNC>
__device__ __forceinline__ void stage_rows(bf16* dst, const bf16* src, int row_stride, int rows_left, int HS) {
    if constexpr (ASYNC) {
        constexpr int PER_ROW = HSP / 8;                 // 16-byte pieces per row
        constexpr int ROWS_PER_PASS = THREADS / PER_ROW;
        static_assert(THREADS % PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0, "whole rows, whole passes");
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        const uint32_t to = smem_addr(dst + r0 * S + d);
        // A piece past HS reads nothing (zero-fill), but its address must still lie inside the
        // tensor: it names the row's last real piece instead.
        const bf16* from = src + (size_t)r0 * row_stride + min(d, HS - 8);
        if (rows_left >= ROWS) {  // a whole tile (uniform): no row tests, one add per piece
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++)
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride, d < HS);
        } else {
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++) {
                const bool valid = r0 + k * ROWS_PER_PASS < rows_left && d < HS;
                const bf16* piece = valid ? from + (size_t)k * ROWS_PER_PASS * row_stride : src;
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, piece, valid);
            }
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, d = i % HSP;
            dst[r * S + d] = r < rows_left && d < HS ? src[(size_t)r * row_stride + d] : to_bf16(0.0f);
        }
    }
}

// TilePieces<HSP, S, THREADS>(head, row_stride, HS): a thread's share of stage_rows' ASYNC copy of a
// whole 64-row tile, with the per-thread part of the addresses computed once: src = the thread's
// first piece in row 0 of `head` (add the tile's offset), copy(dst, src, row_stride) issues its
// four (HSP = 64) or eight (128) 16-byte copies into the tile at shared address dst. Pieces past
// HS are zero-filled from an in-bounds address, as in stage_rows.
template <int HSP, int S, int THREADS>
struct TilePieces {
    static constexpr int PER_ROW = HSP / 8, ROWS_PER_PASS = THREADS / PER_ROW, PASSES = 64 / ROWS_PER_PASS;
    const bf16* src;
    uint32_t offset;  // the thread's first piece in a shared tile, bytes
    bool valid;
    __device__ __forceinline__ TilePieces(const bf16* head, int row_stride, int HS) {
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        src = head + (size_t)r0 * row_stride + min(d, HS - 8);
        offset = (r0 * S + d) * 2;
        valid = d < HS;
    }
    __device__ __forceinline__ void copy(uint32_t dst, const bf16* from, int row_stride) const {
#pragma unroll
        for (int k = 0; k < PASSES; k++)
            cp_async_16(dst + offset + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride,
                        valid);
    }
};

// K: lane l gives key (l % 8) + 8 (l / 16), channel 8 ((l / 8) % 2): the matrices are the b0, b1 of
// n-tile 2p and the b0, b1 of n-tile 2p + 1. V (.trans): key l % 16, channel 8 (l / 16): the b0, b1
// of channel n-tile 2n, then of 2n + 1. Byte offsets of a 16-key / 16-channel step are constants.
template <int S>
__device__ __forceinline__ uint32_t k_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 8 + 8 * (lane / 16)) * S + 8 * (lane / 8 % 2));
}

template <int S>
__device__ __forceinline__ uint32_t v_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 16) * S + 8 * (lane / 16));
}

template <int S>
__device__ __forceinline__ uint32_t q_lane(const bf16* q_rows) {
    const int lane = threadIdx.x % 32;
    return smem_addr(q_rows + (lane % 16) * S + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void q_fragments(uint32_t (&qf)[MT][KT][4], const bf16* q_rows) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
            ldmatrix_x4(qf[mt][kk], q_rows + (16 * mt + lane % 16) * S + 16 * kk + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void qk(float (&s)[MT][8][4], const uint32_t (&qf)[MT][KT][4], uint32_t k) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k + (16 * p * S + 16 * kk) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {  // one fragment, MT mma: the point of MT = 2
                mma_bf16_16816(s[mt][2 * p], qf[mt][kk], kb[0], kb[1]);
                mma_bf16_16816(s[mt][2 * p + 1], qf[mt][kk], kb[2], kb[3]);
            }
        }
}

template <int MT, int KT, int S>
__device__ __forceinline__ void qk_smem(float (&s)[MT][8][4], uint32_t q, uint32_t k) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t qf[MT][4];  // this 16-channel step's Q fragments only: 8 registers at MT = 2
#pragma unroll
        for (int mt = 0; mt < MT; mt++) ldmatrix_x4(qf[mt], q + (16 * mt * S + 16 * kk) * 2);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k + (16 * p * S + 16 * kk) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16_16816(s[mt][2 * p], qf[mt], kb[0], kb[1]);
                mma_bf16_16816(s[mt][2 * p + 1], qf[mt], kb[2], kb[3]);
            }
        }
    }
}

template <int MT>
__device__ __forceinline__ void mask_causal(float (&s)[MT][8][4], int key0, int row0) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int d = key0 + 2 * t - row0 - g;  // key - row for mt = 0, n = 0, e = 0
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + 8 * n + (e & 1) - 16 * mt - 8 * (e >> 1) > 0) s[mt][n][e] = -INFINITY;
}

template <int MT>
__device__ __forceinline__ bool softmax_tile(float (&s)[MT][8][4], uint32_t (&p)[MT][4][4], float (&m)[MT][2],
                                             float (&l)[MT][2], float (&alpha)[MT][2], float sl, float slack) {
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float a = fmaxf(s[mt][0][2 * r], s[mt][0][2 * r + 1]), b = fmaxf(s[mt][1][2 * r], s[mt][1][2 * r + 1]);
#pragma unroll
            for (int n = 2; n < 8; n += 2) {  // two chains: half the dependent latency
                a = fmaxf(a, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                b = fmaxf(b, fmaxf(s[mt][n + 1][2 * r], s[mt][n + 1][2 * r + 1]));
            }
            // The reference point m moves only when the tile's maximum passes it by more than
            // slack: until then p <= 2^slack, harmless in fp32 sums and bf16 P (the same relative
            // rounding at any magnitude), and o needs no rescaling. Every row's first tile holds
            // key 0, which no mask removes: after it m is finite, and s sl - m never inf - inf.
            const float mx = warp_max<4>(fmaxf(a, b)) * sl;
            const bool up = mx > m[mt][r] + slack;  // always on the first tile (m = -inf)
            const float mn = up ? mx : m[mt][r];
            alpha[mt][r] = exp2f(m[mt][r] - mn);  // 1 if m stays; 0 on the first tile
            m[mt][r] = mn;
            grew |= up;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int n = 0; n < 8; n++) {  // one FFMA and one MUFU.EX2 a score
                s[mt][n][2 * r] = exp2f(fmaf(s[mt][n][2 * r], sl, -mn));
                s[mt][n][2 * r + 1] = exp2f(fmaf(s[mt][n][2 * r + 1], sl, -mn));
                sa += s[mt][n][2 * r];
                sb += s[mt][n][2 * r + 1];
            }
            l[mt][r] = fmaf(l[mt][r], alpha[mt][r], sa + sb);
        }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            p[mt][kk][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][kk][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][kk][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][kk][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
    return grew;
}

template <int MT, int DT, int S>
__device__ __forceinline__ void pv(float (&o)[MT][DT][4], const uint32_t (&p)[MT][4][4], uint32_t v) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v + (16 * kk * S + 16 * n) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16_16816(o[mt][2 * n], p[mt][kk], vb[0], vb[1]);
                mma_bf16_16816(o[mt][2 * n + 1], p[mt][kk], vb[2], vb[3]);
            }
        }
}

template <int MT, int DT>
__device__ __forceinline__ void rescale(float (&o)[MT][DT][4], const float (&alpha)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < DT; n++) {
            o[mt][n][0] *= alpha[mt][0];
            o[mt][n][1] *= alpha[mt][0];
            o[mt][n][2] *= alpha[mt][1];
            o[mt][n][3] *= alpha[mt][1];
        }
}

template <int MT, bool PAIRS, int DT>
__device__ __forceinline__ void store_rows(bf16* out, float* lse, const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], int row0, int b, int h, int T, int NH, int HS) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int C = NH * HS;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 16 * mt + g + 8 * r;
            const float sum = warp_sum<4>(l[mt][r]);  // every lane: shuffles before the row test
            if (row >= T) continue;
            const float inv = 1.0f / sum;
            if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m[mt][r] + log2f(sum)) * 0.6931471805599453f;
            bf16* dst = out + ((size_t)b * T + row) * C + (size_t)h * HS;
#pragma unroll
            for (int n = 0; n < DT; n++) {
                const int d = 8 * n + 2 * t;
                const float x = o[mt][n][2 * r] * inv, y = o[mt][n][2 * r + 1] * inv;
                if (PAIRS) {  // HS even: d < HS covers d + 1
                    if (d < HS) *reinterpret_cast<uint32_t*>(dst + d) = pack_bf16x2(x, y);
                } else {
                    if (d < HS) dst[d] = to_bf16(x);
                    if (d + 1 < HS) dst[d + 1] = to_bf16(y);
                }
            }
        }
}

#endif  // KERNELS_COMMON_ATTENTION_FWD_MMA_CUH
