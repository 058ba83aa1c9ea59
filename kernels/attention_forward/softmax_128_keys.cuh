// softmax_128_keys.cuh: attention_forward 15-17's work on one tile of up to 128 keys, for a
// warpgroup of 64 query rows: S's wgmma, the mask, the online softmax, P V's wgmma; and the order
// in which their blocks take the query tiles.
//
// attend<H>(o, m, l, dq, dk, dv, key0, row0, diagonal, sl): one tile of H halves of 64 keys (H = 2:
//   128 keys; H = 1: the lone half at a query tile's diagonal). S's wgmma for every half, one wait,
//   the mask on the diagonal half, the maximum over all the tile's keys, then for each half its P
//   and its P V's wgmma (the first half's product runs while the second's P is computed), one wait.
//   dq, dk, dv: sw128 descriptors of Q and of the tile's first K and V half (the second is 8 KB
//   on: +512 in a descriptor). o, m, l: the warpgroup's running output, maxima and sums.
// RESCALE_SLACK: the reference point m of a row moves only when the tile's maximum passes it by
//   more than this (version 14's rule); P's terms stay below 2^RESCALE_SLACK.
// block_query_tile<GROUP, BR>(bh, q0): the block's (batch * head, first query row), on a grid of
//   (B NH, cdiv(T, BR)) blocks. Blocks start in the order of their linear index, remapped so that
//   GROUP heads run their query tiles together, the longest first across the group: the blocks in
//   flight then read the K and V of a few dozen heads, not every head's (48 MB at the trainer's
//   shape).

#ifndef KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH
#define KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH

#include "attention_fwd_mma.cuh"  // mask_causal, rescale (version 11's)
#include "bf16.cuh"
#include "reduce.cuh"             // warp_max
#include "wgmma.cuh"

#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif

// The online softmax of a tile, in two steps so that P V can start on the first half while the
// second is exponentiated. s holds the scores (H halves of 64 keys, wgmma's accumulator layout:
// rows g and g + 8 of the warp's 16, four columns of each 8 a lane... as version 11's helpers).
//
// tile_max: the rows' maximum over all H halves, scaled by sl; the reference point m moves only
// when that passes it by more than `slack` (version 14's rule, there per 64 keys); alpha =
// exp2(m_old - m_new); returns whether any row of this thread moved (then O needs rescaling).
template <int H>
__device__ __forceinline__ bool tile_max(const float (&s)[H][1][8][4], float (&m)[2], float (&alpha)[2], float sl,
                                         float slack) {
    bool grew = false;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float a = fmaxf(s[0][0][0][2 * r], s[0][0][0][2 * r + 1]), b = fmaxf(s[0][0][1][2 * r], s[0][0][1][2 * r + 1]);
#pragma unroll
        for (int h = 0; h < H; h++)
#pragma unroll
            for (int n = (h == 0 ? 2 : 0); n < 8; n += 2) {  // two chains of maxima
                a = fmaxf(a, fmaxf(s[h][0][n][2 * r], s[h][0][n][2 * r + 1]));
                b = fmaxf(b, fmaxf(s[h][0][n + 1][2 * r], s[h][0][n + 1][2 * r + 1]));
            }
        const float mx = warp_max<4>(fmaxf(a, b)) * sl;
        const bool up = mx > m[r] + slack;  // always on a row's first tile (m = -inf), which holds key 0
        const float mn = up ? mx : m[r];
        alpha[r] = exp2f(m[r] - mn);
        m[r] = mn;
        grew |= up;
    }
    return grew;
}

// half_p: one half's P = exp2(s sl - m), its rows' sums added to sum, packed to bf16 for P V.
__device__ __forceinline__ void half_p(float (&s)[1][8][4], uint32_t (&p)[4][4], const float (&m)[2],
                                       float (&sum)[2], float sl) {
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[0][n][2 * r] = exp2f(fmaf(s[0][n][2 * r], sl, -m[r]));
            s[0][n][2 * r + 1] = exp2f(fmaf(s[0][n][2 * r + 1], sl, -m[r]));
            sum[r] += s[0][n][2 * r] + s[0][n][2 * r + 1];
        }
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        p[kk][0] = pack_bf16x2(s[0][2 * kk][0], s[0][2 * kk][1]);
        p[kk][1] = pack_bf16x2(s[0][2 * kk][2], s[0][2 * kk][3]);
        p[kk][2] = pack_bf16x2(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        p[kk][3] = pack_bf16x2(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
}

// One tile of H halves (H = 2: 128 keys; H = 1: the lone half at a query tile's diagonal): S's
// wgmma for every half, one wait, the mask on the diagonal half, the maximum, then for each half
// its P and its P V's wgmma (the first half's product runs while the second's P is computed),
// one wait. dk, dv: descriptors of the tile's first K and V half (the second is 8 KB on: +512).
template <int H>
__device__ __forceinline__ void attend(float (&o)[1][8][4], float (&m)[1][2], float (&l)[1][2], uint64_t dq,
                                       uint64_t dk, uint64_t dv, int key0, int row0, bool diagonal, float sl) {
    float sc[H][1][8][4], alpha[1][2], sum[2] = {0.0f, 0.0f};
    uint32_t p[H][4][4];
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < H; h++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(sc[h][0], dq + 2 * kk, dk + 512 * h + 2 * kk, kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    if (diagonal) mask_causal<1>(sc[H - 1], key0 + 64 * (H - 1), row0);  // the last half: keys past a row masked
    if (tile_max<H>(sc, m[0], alpha[0], sl, RESCALE_SLACK)) rescale<1, 8>(o, alpha);
#pragma unroll
    for (int h = 0; h < H; h++) {
        half_p(sc[h], p[h], m[0], sum, sl);
        wgmma_fence();  // this half's P (and O, rescaled) written before the tensor cores read them
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(o[0], p[h][kk], dv + 512 * h + 128 * kk);  // +2048 bytes: 16 keys
    }
    wgmma_commit();
#pragma unroll
    for (int r = 0; r < 2; r++) l[0][r] = fmaf(l[0][r], alpha[0][r], sum[r]);
    wgmma_wait<0>();  // at once, as in version 14
}

template <int GROUP, int BR>
__device__ __forceinline__ void block_query_tile(int& bh, int& q0) {
    const int heads = gridDim.x, qtiles = gridDim.y;
    const int L = blockIdx.y * heads + blockIdx.x;
    const int g0 = L / (GROUP * qtiles) * GROUP;  // the group's first head
    const int gn = min(GROUP, heads - g0);        // its heads (the last group may be short)
    const int r = L - g0 * qtiles;                // the block's place in its group
    bh = g0 + r % gn;
    q0 = (qtiles - 1 - r / gn) * BR;              // the longest query tiles first
}

#endif  // KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH
