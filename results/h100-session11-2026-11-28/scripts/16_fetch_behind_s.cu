/*
title = "variant of 15: the next tile's copies issued while S is multiplied"
builds_on = 14
precision = "bf16"
changed = """
Version 14's block is two warpgroups of 64 query rows sharing 64-key tiles and two producer warps,
two blocks an SM (four warpgroups), 96 registers a thread. Here a block is one warpgroup of 64
rows that fetches its own tiles, and a tile is 128 keys:
* S for a tile is two 64-key halves (eight wgmma, one commit, one wait), and the row maximum is
  taken over all 128 keys at once: half the waits and rescale decisions a key.
* P V is eight wgmma from registers; the first half's four start while the second half's P is
  computed.
* No producer warps and no mbarriers: the warpgroup fetches tile j + 1 (cp.async, 128 threads,
  version 13's copy) right after the block barrier that opens tile j, into the other of two
  32 KB buffers; that barrier also says every warp is done with the buffer being refilled.
* 73 KB a block, three blocks an SM: three warpgroups, each with up to 168 registers (162 used)
  to hold S for 128 keys beside O. (A producer warp costs this: five warps a block put four on
  some scheduler, whose 16K registers then allow 128 a thread, and S and O spilled.)
* A query tile's keys end at its diagonal: where that leaves one half of the last tile (the
  block's first row a multiple of 128), only that half is multiplied and softmaxed.
* Blocks run heads fastest, the longest query tiles (the most keys) first, as in version 14.
"""
why = """
cuDNN's forward kernel at the trainer's shape is named ..._64x128x64_4x1x1: a 64-row query tile,
128-key tiles, the 64-wide head, one warpgroup a block. On the H100 version 14 took 96.2-96.8 us
against cuDNN's 88.4-88.8 (1.09x; Nsight Compute: SM throughput 49%, issue slots 48%: latency-
bound, not DRAM-bound: launching a head's query tiles together raised its L2 hit rate from 34% to
62% and made it slower, 102-103 us). Fewer, longer rounds per key give each warpgroup more tensor
work per wait.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma: a Hopper; elsewhere the workbench refuses it (the build there is a trap)

[[launch]]
kernel = "attention_forward15"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "1024 + 64 * 128 + 2 * 2 * 128 * 128"
args = ["out", "lse", "qkv", "T", "NH", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_fwd_mma.cuh"  // mask_causal, rescale, store_rows (version 11's)
#include "bf16.cuh"
#include "producers.cuh"          // produce_tile (version 13's copy, here by all 128 threads)
#include "mma.cuh"                // cp_async_16, smem_addr
#include "reduce.cuh"             // warp_max
#include "wgmma.cuh"

#define BR 64      // query rows a block: one warpgroup
#define BC 128     // keys a tile: two halves of 64
#define HSW 64     // the head size this version is written for
#define STAGES 2   // K/V buffers: tile j + 1 is fetched while tile j is computed
#define THREADS 128   // one warpgroup, which fetches its own tiles
#ifndef HEAD_GROUP
#define HEAD_GROUP 24  // heads whose query tiles run together (see the block's remap)
#endif
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
template <int H, typename F>
__device__ __forceinline__ void attend(float (&o)[1][8][4], float (&m)[1][2], float (&l)[1][2], uint64_t dq,
                                       uint64_t dk, uint64_t dv, int key0, int row0, bool diagonal, float sl,
                                       F&& meanwhile) {
    float sc[H][1][8][4], alpha[1][2], sum[2] = {0.0f, 0.0f};
    uint32_t p[H][4][4];
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < H; h++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(sc[h][0], dq + 2 * kk, dk + 512 * h + 2 * kk, kk > 0);
    wgmma_commit();
    meanwhile();  // the next tile's copies, issued while the tensor cores take S
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

extern "C" __global__ void __launch_bounds__(THREADS, 3)
attention_forward15(bf16* out, float* lse, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t TILE = BC * 128;                         // one K or V tile: 16 KB (two halves of 8)
    const uint32_t sQ = base, sKV = base + BR * 128;            // buffer s: K at sKV + 2 s TILE, V after it

    // Blocks start in the order of their linear index. It is remapped so that HEAD_GROUP heads run
    // their query tiles together, the longest first across the group: the blocks in flight then
    // read the K and V of a few dozen heads, not every head's (48 MB at the trainer's shape).
    const int heads = gridDim.x, qtiles = gridDim.y;
    const int L = blockIdx.y * heads + blockIdx.x;
    const int g0 = L / (HEAD_GROUP * qtiles) * HEAD_GROUP;   // the group's first head
    const int gn = min(HEAD_GROUP, heads - g0);               // its heads (the last group may be short)
    const int r = L - g0 * qtiles;                            // the block's place in its group
    const int bh = g0 + r % gn;
    const int q0 = (qtiles - 1 - r / gn) * BR;                // the longest query tiles first
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const int halves = q0 / 64 + 1;         // 64-key halves up to the diagonal (q0 < T: every block has rows)
    const int tiles = (halves + 1) / 2;     // 128-key tiles; the last holds one half when `halves` is odd
    const int keys = min(T, 64 * halves);   // no key past the diagonal's half is read
    auto fetch = [&](int i) {               // tile i's K and V into buffer i % STAGES: one cp.async group
        const uint32_t sK = sKV + 2 * (i % STAGES) * TILE;
        const bf16* k_src = q_base + (size_t)i * BC * rs + C;
        produce_tile<BC, THREADS, 0>(sK, k_src, rs, keys - i * BC, qkv);
        produce_tile<BC, THREADS, 0>(sK + TILE, k_src + C, rs, keys - i * BC, qkv);
        cp_async_commit();
    };
    produce_tile<BR, THREADS, 0>(sQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
    fetch(0);  // Q joins tile 0's group

    const int warp = threadIdx.x / 32;
    const int row0 = q0 + 16 * warp;  // this warp's first row
    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ, 1024);

    for (int j = 0; j < tiles; j++) {
        cp_async_wait<0>();  // this thread's copies of tile j (the only group in flight) have landed
        __syncthreads();     // everyone's have; and everyone is done with tile j - 1, whose buffer...
        fence_proxy_async();  // the landed copies (ordinary writes), ordered before the tensor cores' reads
        const uint32_t sK = sKV + 2 * (j % STAGES) * TILE;
        const uint64_t dk = sw128_desc(sK, 1024), dv = sw128_desc(sK + TILE, 1024);
        auto next = [&] { if (j + 1 < tiles) fetch(j + 1); };
        if (2 * j + 1 < halves)
            attend<2>(o, m, l, dq, dk, dv, j * BC, row0, j == tiles - 1, sl, next);
        else
            attend<1>(o, m, l, dq, dk, dv, j * BC, row0, true, sl, next);
    }
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
