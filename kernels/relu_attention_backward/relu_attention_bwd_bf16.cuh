// relu_attention_bwd_bf16.cuh: the warp-level pieces of relu_attention_backward 3 (bf16 tensor
// cores), written for a head-size tile HSP of 64 or 128 channels.
//
// The helpers in attention_backward_bf16.cuh are fixed at 64 channels (AB_DH, AB_PITCH); these
// are the same fragment products with the channel count and the row pitch as template
// parameters, so that one kernel template covers every HS <= 128. Layouts follow mma.cuh.
//
// Tiles in shared memory: ROWS rows (tokens) of one head's HS channels, zero padded to HSP
// channels and zero filled past the sequence end, as bf16 rows of RB_PITCH(HSP) = HSP + 8
// elements (144 or 272 bytes: 16 mod 128, so the 8 rows of an ldmatrix 8 x 8 matrix fall in 8
// different 16-byte bank groups: conflict-free).
//
// rb_load_tile<ROWS, HSP, THREADS>(s, base, stride, row0, T, HS, any)
//   Rows row0 .. row0 + ROWS - 1 of the matrix at base (row r at base + r * stride) into tile s:
//   by 16-byte cp.async when HS % 8 == 0 (zero-filled copies read nothing; `any` is a valid
//   address for them), else element by element with plain loads and stores. The caller commits
//   and waits; the tile is visible to the block after the caller's next __syncthreads().
//
// rb_abt<HSP, NT>(x, y, a_rows, b_rows, c_rows, d_rows): two products over channels at once,
//   x (16 x 8 NT) += A . B^T and y += C . D^T, with A, C the 16 rows at a_rows, c_rows (a warp's
//   own rows) and B, D the 8 NT rows at b_rows, d_rows (the streamed tile). B[k][n] = B_tile[n][k]
//   runs along channels, the tile's own row order: plain ldmatrix (see the addressing below).
//
// rb_ab<HSP, NF>(acc, f, tile): acc (16 x HSP) += F (16 x 16 NF, NF A fragments) . tile[0..16 NF)
//   A product over the tile's rows: B[k][n] = tile[k][n] runs down the tile's columns, so
//   ldmatrix .trans.
//
// rb_to_a<NT>(f, c): a 16 x 8 NT fp32 accumulator (C layout) as NT / 2 bf16 A fragments over its
//   columns: f[kk] = {c[2kk][0,1], c[2kk][2,3], c[2kk+1][0,1], c[2kk+1][2,3]}, rounded to bf16
//   (nearest even): C's (row g, columns 8j + 2t, + 1) is exactly A's (row g, k 2t, 2t + 1) of
//   k-block j / 2.
//
// rb_store<NT>(dst, stride, row0, T, HS, c, scale): a 16 x 8 NT accumulator times scale, as bf16,
//   to dst[(row0 + r) * stride + col] for rows < T and columns < HS; one 32-bit store a pair when
//   HS is even (every index even), two 16-bit stores otherwise.

#ifndef KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH
#define KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH

#include "bf16.cuh"
#include "mma.cuh"

template <int HSP>
struct RbTile {
    static constexpr int PITCH = HSP + 8;
};

template <int ROWS, int HSP, int THREADS>
__device__ __forceinline__ void rb_load_tile(bf16* s, const bf16* base, size_t stride, int row0, int T, int HS,
                                             const bf16* any) {
    constexpr int P = RbTile<HSP>::PITCH;
    if (HS % 8 == 0) {
        constexpr int CHUNKS = ROWS * (HSP / 8);
#pragma unroll
        for (int k = 0; k < (CHUNKS + THREADS - 1) / THREADS; k++) {
            const int i = threadIdx.x + k * THREADS;
            if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
            const int r = i / (HSP / 8), c = 8 * (i % (HSP / 8));
            const bool valid = row0 + r < T && c < HS;
            const bf16* src = base + (size_t)(row0 + r) * stride + c;
            cp_async_16(s + r * P + c, valid ? src : any, valid);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, c = i % HSP;
            s[r * P + c] = row0 + r < T && c < HS ? base[(size_t)(row0 + r) * stride + c] : to_bf16(0.0f);
        }
    }
}

// A fragments: lane L addresses row L % 8 + 8 ((L / 8) % 2), channel 16 kk + 8 (L / 16): matrices
// (rows 0-7, +0), (rows 8-15, +0), (rows 0-7, +8), (rows 8-15, +8) = a[0..3].
// B fragments of two n-tiles j, j + 1: lane L addresses row 8 j + L % 8 + 8 (L / 16), channel
// 16 kk + 8 ((L / 8) % 2): matrices (rows 8j.., +0) = b[0] of j, (rows 8j.., +8) = b[1] of j,
// (rows 8j+8.., +0) = b[0] of j+1, (rows 8j+8.., +8) = b[1] of j+1.
template <int HSP, int NT>
__device__ __forceinline__ void rb_abt(float (&x)[NT][4], float (&y)[NT][4], const bf16* a_rows, const bf16* b_rows,
                                       const bf16* c_rows, const bf16* d_rows) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    constexpr int P = RbTile<HSP>::PITCH;
    const int lane = threadIdx.x % 32;
    const int aoff = (lane % 8 + 8 * ((lane / 8) % 2)) * P + 8 * (lane / 16);
    const int boff = (lane % 8 + 8 * (lane / 16)) * P + 8 * ((lane / 8) % 2);
#pragma unroll 2  // not fully: at HSP = 128 a full unroll of rb_abt pushed dkdv128 to 255 registers and spills
    for (int kk = 0; kk < HSP / 16; kk++) {
        unsigned a[4], c[4];
        ldmatrix_x4(a, a_rows + aoff + 16 * kk);
        ldmatrix_x4(c, c_rows + aoff + 16 * kk);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4], d[4];
            ldmatrix_x4(b, b_rows + boff + 8 * j * P + 16 * kk);
            mma_bf16_16816(x[j], a, b[0], b[1]);
            mma_bf16_16816(x[j + 1], a, b[2], b[3]);
            ldmatrix_x4(d, d_rows + boff + 8 * j * P + 16 * kk);
            mma_bf16_16816(y[j], c, d[0], d[1]);
            mma_bf16_16816(y[j + 1], c, d[2], d[3]);
        }
    }
}

// B fragments (.trans) of n-tiles n, n + 1 from rows 16 kk ..: lane L addresses row
// 16 kk + L % 8 + 8 ((L / 8) % 2), column 8 n + 8 (L / 16): matrices (rows 0-7, col +0) = b[0] of
// n, (rows 8-15, +0) = b[1] of n, (rows 0-7, +8) = b[0] of n+1, (rows 8-15, +8) = b[1] of n+1;
// .trans hands lane (g, t) rows 2t, 2t + 1 of column g, as b[] wants.
template <int HSP, int NF>
__device__ __forceinline__ void rb_ab(float (&acc)[HSP / 8][4], const unsigned (&f)[NF][4], const bf16* tile) {
    constexpr int P = RbTile<HSP>::PITCH;
    const int lane = threadIdx.x % 32;
    const bf16* p = tile + (lane % 8 + 8 * ((lane / 8) % 2)) * P + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < NF; kk++) {
#pragma unroll
        for (int n = 0; n < HSP / 8; n += 2) {
            unsigned b[4];
            ldmatrix_x4_trans(b, p + 16 * kk * P + 8 * n);
            mma_bf16_16816(acc[n], f[kk], b[0], b[1]);
            mma_bf16_16816(acc[n + 1], f[kk], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void rb_to_a(unsigned (&f)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        f[kk][0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
        f[kk][1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
        f[kk][2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        f[kk][3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

template <int NT>
__device__ __forceinline__ void rb_store(bf16* dst, size_t stride, int row0, int T, int HS, const float (&c)[NT][4],
                                         float scale) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int col = 8 * n + 2 * t;
        if (col >= HS) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = row0 + g + 8 * half;
            if (row >= T) continue;
            bf16* p = dst + (size_t)row * stride + col;
            if (HS % 2 == 0) {
                *reinterpret_cast<unsigned*>(p) = pack_bf16x2(c[n][2 * half] * scale, c[n][2 * half + 1] * scale);
            } else {
                p[0] = to_bf16(c[n][2 * half] * scale);
                if (col + 1 < HS) p[1] = to_bf16(c[n][2 * half + 1] * scale);
            }
        }
    }
}

#endif  // KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH
