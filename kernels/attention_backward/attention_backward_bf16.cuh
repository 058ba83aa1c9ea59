// attention_backward_bf16.cuh: the warp-level pieces the bf16 tensor-core versions of
// attention_backward (7, 11: dQ by atomics; 8, 10: deterministic split) are built from.
//
// Shared because both versions stage the same bf16 tiles, run the same fragment products and
// store the same way; each version's own file holds its loops (what it computes, in which order,
// and where the barriers go).
//
// Tiles in shared memory: a tile is up to 64 rows (tokens) of one head's HS <= 64 channels, zero
// padded to 64 channels and zero filled past the sequence end, as bf16 rows of AB_PITCH = 72
// elements (144 bytes; see below why 72).
//
// load_tile_async<ROWS, THREADS>(s, base, stride, row0, T, HS, any)
//   Rows row0 .. row0 + ROWS - 1 of the matrix at `base` (row r at base + r * stride, HS channels)
//   into tile s, zero-filled past T and past HS. With HS % 8 == 0 (every row 16-byte aligned: the
//   fast path) by cp.async, 16 bytes (8 channels) a copy, zero-filled copies reading nothing (`any`
//   is a valid address given to those); the caller commits and waits (cp_async_commit /
//   cp_async_wait). Any other HS: element by element with plain loads and stores. Either way the
//   tile is visible to the block after the caller's next __syncthreads(). Every thread calls.
//
// load_queries<THREADS>(q_s, g_s, l_s, d_s, q, q_stride, g, g_stride, lse, D, q0, T, HS)
//   A query tile for the key-tile loops: rows q0 .. q0 + 63 of q (stride q_stride) and dout
//   (stride g_stride) by load_tile_async, and lse[q0 ..], D[q0 ..] into l_s[0..63], d_s[0..63] by
//   4-byte cp.async (zeros past T), then commits: one cp.async group.
//
// load_a16(a, s)
//   The 16 x 64 block of rows s[0..15][0..63] as four A fragments of m16n8k16 (a[kk]: channels
//   16 kk .. 16 kk + 15), by ldmatrix: lane L addresses row L % 8 + 8 ((L / 8) % 2), channel
//   16 kk + 8 (L / 16): matrices 0..3 are (rows 0-7, ch +0), (rows 8-15, ch +0), (rows 0-7, ch +8),
//   (rows 8-15, ch +8), which is a[kk][0..3] (see mma.cuh).
//
// mma_abt<NT>(acc, a, s):  acc (16 x 8 NT) += A (16 x 64, four fragments) . S^T
//   S is a tile of 8 NT rows: the product's column n is S's row n, a dot product over channels
//   (S^T = K Q^T with A = a warp's keys and S = the query tile, dP^T = V dout^T likewise; or
//   S = Q K^T with A = a warp's queries and S = the key tile, dP = dout V^T). The B operand
//   B[k][n] = S[n][k] runs along channels, which is S's own row order: plain ldmatrix. One x4
//   load gives two n-tiles: lane L addresses row 8 j + L % 8 + 8 (L / 16), channel
//   16 kk + 8 ((L / 8) % 2): matrices (rows 8j.., ch +0) = b[0] of tile j, (rows 8j.., ch +8) =
//   b[1] of tile j, (rows 8j+8.., ch +0) = b[0] of tile j+1, (rows 8j+8.., ch +8) = b[1] of j+1.
//
// mma_ab<NT>(acc, a, s):  acc (16 x 8 NT) += A (16 x 16, one fragment) . S[0..15][0..8 NT - 1]
//   A product over the tile's rows (dV += P^T dO over queries, dQ += dS K over keys): B[k][n] =
//   S[k][n] runs down S's columns, so ldmatrix .trans: lane L addresses row L % 8 + 8 ((L/8) % 2),
//   column 8 n + 8 (L / 16): matrices (rows 0-7, col +0) = b[0] of n-tile n, (rows 8-15, col +0) =
//   b[1] of n, (rows 0-7, col +8) = b[0] of n+1, (rows 8-15, col +8) = b[1] of n+1; .trans hands
//   lane (g, t) the elements (rows 2t, 2t+1; column g), as b[] wants.
//
// acc_to_a(a, c): a 16 x 64 fp32 accumulator (8 n-tiles, C layout) as four bf16 A fragments over
//   its 64 columns: a[kk] = {c[2kk][0,1], c[2kk][2,3], c[2kk+1][0,1], c[2kk+1][2,3]} (the C -> A
//   identity in mma.cuh), rounded to bf16.
// store_a_smem(s, a): those four fragments into rows 0..15 of a tile, as 32-bit stores
//   (a[kk][0] -> row g, columns 16 kk + 2t, 2t + 1; [1] -> row g + 8; [2], [3]: columns + 8).
//
// store_rows<NT>(dst, stride, row0, T, col0, HS, c, scale): a 16 x 8 NT accumulator times scale as
//   bf16 to dst[(row0 + r) * stride + col0 + c] (rows g, g + 8; columns 8 n + 2t, 2t + 1), rows
//   < T and columns < HS only. With HS even (so C, the strides and every index even) a pair is one
//   32-bit store; odd HS: two 16-bit stores.
//
// key_pair(dk, dv, ds, k_s, v_s, q_s, g_s, l_s, d_s, kw, q0, T, sl2): one warp's share of a (key
//   tile, query tile) pair when warps own keys: the warp's 16 keys kw .. kw + 15 (their K and V rows
//   at k_s, v_s) against the 64 queries q0 .. q0 + 63 (tiles q_s, g_s of q and dout, their lse and D
//   at l_s[0..63], d_s[0..63]):
//     S^T = K Q^T, dP^T = V dout^T                     (16 x 64 each, fp32 accumulators)
//     P^T = exp(scale S^T - lse) = 2^(S^T sl2 - lse log2 e), 0 where key > query or query >= T
//     dS^T = P^T (dP^T - D)
//     dV += P^T dout, dK += dS^T Q                     (16 x 64 each; dK still without its scale)
//   and returns dS^T in ds as bf16 A fragments (for a dQ product). Accumulator element x[j][e] is
//   (key kw + g + 8 (e / 2), query q0 + 8 j + 2 t + e % 2), so lse and D are per column: lane t
//   reads l_s[8 j + 2 t] and the next one as a float2. The mask is applied only on tiles that
//   touch the diagonal (kw + 15 > q0) or the sequence end.
//
// Two m-tiles a warp (attention_backward 10, 11: a warp owns 32 rows, rows 0-15 and 16-31 of its
// A operand in a[0], a[1]), each B fragment loaded once for both:
// abt2<NT>(acc, a, s): acc[mt] (16 x 8 NT) += A[mt] (16 x 64, four fragments) . S^T, S = 8 NT rows
//   of a tile (mma_abt's product and its ldmatrix addressing, one load feeding four mma).
// ab2(acc, a, s): acc[mt] (16 x 64) += A[mt] (16 x 16, one fragment) . S[0..15][0..63] (mma_ab's,
//   ldmatrix .trans, one load feeding four mma).
// c_to_a<NT>(a, c, kk): accumulator n-tiles 2 kk, 2 kk + 1 of c (16 rows x 16 columns) as one bf16
//   A fragment whose k index is those 16 columns (acc_to_a's identity, one fragment).
// Flag<B>: a compile-time yes / no passed by value, so a loop can pick between two instantiations of
//   one step (e.g. with and without the causal mask): step(..., Flag<true>{}).
//
// rows_to_bf16(dst, dst_stride, src, rows, C, scale): dst[r * dst_stride + c] = bf16(scale *
//   src[r * C + c]) for rows x C fp32 elements (a dQ accumulator into dqkv's q part), 8 consecutive
//   elements a thread: two float4 loads and one Pack8 store when C % 8 == 0 (and dst_stride too),
//   else one by one. Launch cdiv(rows * C, 8) threads.
//
// dot_rows(D, zero, dout, out, B, T, NH, HS): D[b, h, t] = dout[b, t, h, :] . out[b, t, h, :] in
//   fp32 (8 lanes per row: one Pack8 each when HS % 8 == 0, HS <= 64; else element by element),
//   and, if zero != nullptr, zero[b, t, h, 0..HS) = 0 (an fp32 (B, T, C) accumulator). 4 rows per
//   warp; call with every thread of the grid (whole warps: the shuffles).
//
// Bank conflicts: rows of 144 bytes put the 8 rows of an 8 x 8 ldmatrix matrix (same column) at
// 8 different 16-byte offsets modulo 128: conflict-free. store_a_smem's 32 lanes write words
// (g * 36 + t) + const: 32 different banks.

#ifndef KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH
#define KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH

#include "bf16.cuh"
#include "mma.cuh"
#include "reduce.cuh"

#define AB_DH 64      // channels per tile row (HS zero-padded to 64)
#define AB_PITCH 72   // bf16 per tile row in shared memory (64 + 8: 144 bytes)
#define AB_LOG2E 1.4426950408889634f

template <int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(bf16* s, const bf16* base, size_t stride, int row0, int T,
                                                int HS, const bf16* any) {
    if (HS % 8 == 0) {  // every row starts 16-byte aligned: cp.async, 8 channels a copy
        constexpr int CHUNKS = ROWS * (AB_DH / 8);
#pragma unroll
        for (int k = 0; k < (CHUNKS + THREADS - 1) / THREADS; k++) {
            int i = threadIdx.x + k * THREADS;
            if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
            int r = i / (AB_DH / 8), c = 8 * (i % (AB_DH / 8));
            bool valid = row0 + r < T && c < HS;
            const bf16* src = base + (size_t)(row0 + r) * stride + c;
            cp_async_16(s + r * AB_PITCH + c, valid ? src : any, valid);
        }
    } else {  // odd head sizes: element by element, plain loads and stores
        for (int i = threadIdx.x; i < ROWS * AB_DH; i += THREADS) {
            int r = i / AB_DH, c = i % AB_DH;
            s[r * AB_PITCH + c] = row0 + r < T && c < HS ? base[(size_t)(row0 + r) * stride + c] : to_bf16(0.0f);
        }
    }
}

template <int THREADS>
__device__ __forceinline__ void load_queries(bf16* q_s, bf16* g_s, float* l_s, float* d_s, const bf16* q,
                                             size_t q_stride, const bf16* g, size_t g_stride, const float* lse,
                                             const float* D, int q0, int T, int HS) {
    load_tile_async<64, THREADS>(q_s, q, q_stride, q0, T, HS, q);
    load_tile_async<64, THREADS>(g_s, g, g_stride, q0, T, HS, g);
    if (threadIdx.x < 64) {
        const int r = threadIdx.x;
        const bool valid = q0 + r < T;
        cp_async_4(l_s + r, valid ? lse + q0 + r : lse, valid);
        cp_async_4(d_s + r, valid ? D + q0 + r : D, valid);
    }
    cp_async_commit();
}

__device__ __forceinline__ void load_a16(unsigned (&a)[AB_DH / 16][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) ldmatrix_x4(a[kk], p + 16 * kk);
}

template <int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const unsigned (&a)[AB_DH / 16][4], const bf16* s) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * (lane / 16)) * AB_PITCH + 8 * ((lane / 8) % 2);
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, p + 8 * j * AB_PITCH + 16 * kk);
            mma_bf16_16816(acc[j], a[kk], b[0], b[1]);
            mma_bf16_16816(acc[j + 1], a[kk], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void mma_ab(float (&acc)[NT][4], const unsigned (&a)[4], const bf16* s) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, p + 8 * n);
        mma_bf16_16816(acc[n], a, b[0], b[1]);
        mma_bf16_16816(acc[n + 1], a, b[2], b[3]);
    }
}

__device__ __forceinline__ void acc_to_a(unsigned (&a)[AB_DH / 16][4], const float (&c)[AB_DH / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
        a[kk][0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

__device__ __forceinline__ void store_a_smem(bf16* s, const unsigned (&a)[AB_DH / 16][4]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
        bf16* p = s + g * AB_PITCH + 16 * kk + 2 * t;
        *reinterpret_cast<unsigned*>(p) = a[kk][0];
        *reinterpret_cast<unsigned*>(p + 8 * AB_PITCH) = a[kk][1];
        *reinterpret_cast<unsigned*>(p + 8) = a[kk][2];
        *reinterpret_cast<unsigned*>(p + 8 * AB_PITCH + 8) = a[kk][3];
    }
}

template <int NT>
__device__ __forceinline__ void store_rows(bf16* dst, size_t stride, int row0, int T, int col0, int HS,
                                           const float (&c)[NT][4], float scale) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int col = col0 + 8 * n + 2 * t;
        if (col >= HS) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int row = row0 + g + 8 * half;
            if (row >= T) continue;
            bf16* p = dst + (size_t)row * stride + col;
            if (HS % 2 == 0) {  // HS even: every index even, the pair is one aligned 32-bit store
                *reinterpret_cast<unsigned*>(p) = pack_bf16x2(c[n][2 * half] * scale, c[n][2 * half + 1] * scale);
            } else {
                p[0] = to_bf16(c[n][2 * half] * scale);
                if (col + 1 < HS) p[1] = to_bf16(c[n][2 * half + 1] * scale);
            }
        }
    }
}

__device__ __forceinline__ void key_pair(float (&dk)[AB_DH / 8][4], float (&dv)[AB_DH / 8][4],
                                         unsigned (&ds)[AB_DH / 16][4], const bf16* k_s, const bf16* v_s,
                                         const bf16* q_s, const bf16* g_s, const float* l_s, const float* d_s,
                                         int kw, int q0, int T, float sl2) {
    constexpr int NT = 8;  // 64 queries: n-tiles of S^T, dP^T; also k-steps * 2 of dV, dK
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[NT][4] = {}, dp[NT][4] = {};
    unsigned a[AB_DH / 16][4];
    load_a16(a, k_s);
    mma_abt<NT>(s, a, q_s);   // S^T = K Q^T
    load_a16(a, v_s);
    mma_abt<NT>(dp, a, g_s);  // dP^T = V dout^T
    const bool edge = kw + 15 > q0 || q0 + 64 > T;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int col = 8 * j + 2 * t;
        const float2 l2 = *reinterpret_cast<const float2*>(l_s + col);
        const float2 d2 = *reinterpret_cast<const float2*>(d_s + col);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int query = q0 + col + (e & 1), key = kw + g + 8 * (e >> 1);
            float p = exp2f(fmaf(s[j][e], sl2, -((e & 1) ? l2.y : l2.x) * AB_LOG2E));
            if (edge && (key > query || query >= T)) p = 0.0f;
            s[j][e] = p;
            dp[j][e] = p * (dp[j][e] - ((e & 1) ? d2.y : d2.x));
        }
    }
    acc_to_a(a, s);  // P^T as A fragments
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) mma_ab<AB_DH / 8>(dv, a[kk], g_s + 16 * kk * AB_PITCH);  // dV += P^T dout
    acc_to_a(ds, dp);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) mma_ab<AB_DH / 8>(dk, ds[kk], q_s + 16 * kk * AB_PITCH);  // dK += dS^T Q
}

template <int NT>
__device__ __forceinline__ void abt2(float (&acc)[2][NT][4], const unsigned (&a)[2][AB_DH / 16][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const uint32_t p = smem_addr(s + (lane % 8 + 8 * (lane / 16)) * AB_PITCH + 8 * ((lane / 8) % 2));
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++)
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, p + 2 * (8 * j * AB_PITCH + 16 * kk));
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                mma_bf16_16816(acc[mt][j], a[mt][kk], b[0], b[1]);
                mma_bf16_16816(acc[mt][j + 1], a[mt][kk], b[2], b[3]);
            }
        }
}

__device__ __forceinline__ void ab2(float (&acc)[2][AB_DH / 8][4], const unsigned (&a)[2][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const uint32_t p = smem_addr(s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16));
#pragma unroll
    for (int n = 0; n < AB_DH / 8; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, p + 2 * 8 * n);
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            mma_bf16_16816(acc[mt][n], a[mt], b[0], b[1]);
            mma_bf16_16816(acc[mt][n + 1], a[mt], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void c_to_a(unsigned (&a)[4], const float (&c)[NT][4], int kk) {
    a[0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

__device__ __forceinline__ void rows_to_bf16(bf16* dst, int dst_stride, const float* src, int rows, int C,
                                             float scale) {
    const long long i = 8 * ((long long)blockIdx.x * blockDim.x + threadIdx.x), n = (long long)rows * C;
    if (i >= n) return;
    if (C % 8 == 0 && dst_stride % 8 == 0) {
        const float4 x0 = reinterpret_cast<const float4*>(src + i)[0], x1 = reinterpret_cast<const float4*>(src + i)[1];
        const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        Pack8 p;
#pragma unroll
        for (int k = 0; k < 8; k++) p.v[k] = to_bf16(x[k] * scale);
        store8(dst + (i / C) * dst_stride + i % C, p);
    } else {
        for (long long e = i; e < i + 8 && e < n; e++) dst[(e / C) * dst_stride + e % C] = to_bf16(src[e] * scale);
    }
}

// dst[0] += x, dst[1] += y as one vector reduction (sm_90; dst 8-byte aligned), no result read.
__device__ __forceinline__ void red_add_v2(float* dst, float x, float y) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
}

// A warp's 16 keys of dK (times scale) and dV into dqkv's k and v parts: acc[n][e] is the key
// kr + 8 (e / 2) (kr: the lane's first, warp's first + lane / 4) and channel 8 n + 2 (lane % 4) +
// e % 2 of head h, the m16n8 accumulator layout (eight n-tiles: 64 channels); keys >= T skipped.
__device__ __forceinline__ void store_dk_dv(bf16* dqkv, const float (&dk)[8][4], const float (&dv)[8][4], int kr,
                                            int b, int h, int T, int C, float scale) {
    const int t = threadIdx.x % 4;
    const size_t rs = 3 * (size_t)C;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        const int ch = 8 * n + 2 * t;
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int key = kr + 8 * hr;
            if (key < T) {
                bf16* row = dqkv + ((size_t)b * T + key) * rs + (size_t)h * 64 + ch;
                *reinterpret_cast<uint32_t*>(row + C) = pack_bf16x2(scale * dk[n][2 * hr], scale * dk[n][2 * hr + 1]);
                *reinterpret_cast<uint32_t*>(row + 2 * C) = pack_bf16x2(dv[n][2 * hr], dv[n][2 * hr + 1]);
            }
        }
    }
}

template <bool B>
struct Flag {
    static constexpr bool value = B;
};

__device__ __forceinline__ void dot_rows(float* D, float* zero, const bf16* dout, const bf16* out,
                                         int B, int T, int NH, int HS) {
    const int lane8 = threadIdx.x % 8;
    const long long row = (long long)blockIdx.x * (blockDim.x / 8) + threadIdx.x / 8;  // (b, t, h)
    const bool valid = row < (long long)B * T * NH;
    const int h = (int)(row % NH);
    const long long bt = row / NH;
    const size_t at = (size_t)bt * NH * HS + (size_t)h * HS;  // the row's (B, T, C) index
    float s = 0.0f;
    if (valid && HS % 8 == 0) {  // one Pack8 of each per lane (HS <= 64)
        if (8 * lane8 < HS) {
            Pack8 g = load8_stream(dout + at + 8 * lane8), o = load8_stream(out + at + 8 * lane8);
#pragma unroll
            for (int i = 0; i < 8; i++) s = fmaf(to_float(g.v[i]), to_float(o.v[i]), s);
            if (zero != nullptr) {
                reinterpret_cast<float4*>(zero + at + 8 * lane8)[0] = make_float4(0.f, 0.f, 0.f, 0.f);
                reinterpret_cast<float4*>(zero + at + 8 * lane8)[1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    } else if (valid) {  // odd head sizes: element by element
        for (int c = lane8; c < HS; c += 8) {
            s = fmaf(to_float(dout[at + c]), to_float(out[at + c]), s);
            if (zero != nullptr) zero[at + c] = 0.0f;
        }
    }
    s = warp_sum<8>(s);  // the 8 lanes of this row (all 32 lanes call)
    if (lane8 == 0 && valid) {
        int t = (int)(bt % T), b = (int)(bt / T);
        D[((size_t)b * NH + h) * T + t] = s;
    }
}

#endif  // KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH
