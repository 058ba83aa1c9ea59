/*
title = "bf16 wgmma flash attention: the TMA's tiles, the block's first tile copied while the tensor maps are acquired"
builds_on = 16
precision = "bf16"
changed = """
Version 16 with the block's start as version 15's: the warpgroup's own cp.async copies bring Q and
the first K/V tile, and while they are in flight thread 0 initialises the mbarriers, acquires the
tensor maps and asks the TMA for tile 1. From tile 1 on, the tiles come from the TMA as in 16
(tile j, j >= 1, completes phase (j - 1) / 2 of buffer j % 2's mbarrier). Every block pays
the acquire (a fence that waits for memory) and the TMA's first read of each map's descriptor
before its first copy; in 16 both lay on the path to its first product, here under Q and tile 0's
copies.
"""
why = """
Session 19, on the H100, B = 16, T = 1024, NH = 12 (L2 flushed; cuDNN = version 9 in the same
call): version 16 took 96.7-97.6 us against 15's 93.3-93.9 and cuDNN's 87.4-88.3, although Nsight
Compute at base clocks had it at cuDNN's time (105.2 us against 105.0; 15: 110.3). A block of 16
lasts ~24 us and 1,536 of them run four to a slot. Timed side by side (call 3): 16 without the
acquire (a diagnostic only: the maps are written by the host, and the acquire is what orders them
for the TMA) 87.3-88.2 us; this version 89.3-89.5; 15 93.5-93.6; cuDNN 88.1-88.3. So the
cost was the block's start, not the copies themselves.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma and the TMA: a Hopper; elsewhere the workbench refuses it

[[launch]]
kernel = "attention_forward17"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "1024 + 64 * 128 + 2 * 2 * 128 * 128 + 16"
args = ["out", "lse", "tma:qkv, B * T, 3 * C, 64, 64", "tma:qkv, B * T, 3 * C, 128, 64", "qkv", "T", "NH",
        "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_fwd_mma.cuh"  // store_rows (version 11's)
#include "bf16.cuh"
#include "gemm_wgmma.cuh"         // TmaMap, tensormap_acquire, tma_load_2d
#include "mbarrier.cuh"
#include "mma.cuh"                // cp_async_commit / wait, smem_addr
#include "producers.cuh"          // produce_tile (the block's first copies, as version 15's)
#include "softmax_128_keys.cuh"   // version 15's attend and block_query_tile
#include "wgmma.cuh"

#define BR 64      // query rows a block: one warpgroup
#define BC 128     // keys a tile: two halves of 64
#define HSW 64     // the head size this version is written for
#define STAGES 2   // K/V buffers: tile j + 1 is fetched while tile j is computed
#define THREADS 128
#ifndef HEAD_GROUP
#define HEAD_GROUP 24  // heads whose query tiles run together (version 15's remap)
#endif

// map_q: qkv as a (B T) x 3C matrix in 64 x 64 boxes (K and V at a lone diagonal half); map_kv:
// the same matrix in 128 x 64 boxes (a whole tile's K or V); qkv itself for the first copies.
extern "C" __global__ void __launch_bounds__(THREADS, 3)
attention_forward17(bf16* out, float* lse, const TmaMap* map_q, const TmaMap* map_kv, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t TILE = BC * 128;                         // one K or V tile: 16 KB (two halves of 8)
    const uint32_t sQ = base, sKV = base + BR * 128;            // buffer s: K at sKV + 2 s TILE, V after it
    const uint32_t full = sKV + 2 * STAGES * TILE;              // buffer s's mbarrier at full + 8 s

    int bh, q0;
    block_query_tile<HEAD_GROUP, BR>(bh, q0);  // HEAD_GROUP heads' query tiles together, the longest first
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HSW;
    const int row_b = b * T;                // the batch's first row of the (B T) x 3C matrix
    const int halves = q0 / 64 + 1;         // 64-key halves up to the diagonal
    const int tiles = (halves + 1) / 2;     // 128-key tiles; the last holds one half when `halves` is odd
    // Tile i's (i >= 1) K and V into buffer i % STAGES by the TMA, asked for by thread 0.
    auto fetch = [&](int i) {
        const uint32_t sK = sKV + 2 * (i % STAGES) * TILE, bar = full + 8 * (i % STAGES);
        const bool whole = 2 * i + 1 < halves;
        const TmaMap* map = whole ? map_kv : map_q;
        mbar_expect_tx(bar, whole ? 2 * TILE : TILE);
        tma_load_2d(sK, map, C + h * HSW, row_b + i * BC, bar);
        tma_load_2d(sK + TILE, map, 2 * C + h * HSW, row_b + i * BC, bar);
    };
    // Q and tile 0 by the warpgroup's own copies (rows past the diagonal's half or T zero-filled)...
    const size_t rs = 3 * (size_t)C;
    const bf16* k_src = qkv + (size_t)row_b * rs + C + h * HSW;
    produce_tile<BR, THREADS, 0>(sQ, qkv + ((size_t)row_b + q0) * rs + h * HSW, rs, T - q0, qkv);
    produce_tile<BC, THREADS, 0>(sKV, k_src, rs, min(T, 64 * halves), qkv);
    produce_tile<BC, THREADS, 0>(sKV + TILE, k_src + C, rs, min(T, 64 * halves), qkv);
    cp_async_commit();
    if (threadIdx.x == 0) {  // ...while thread 0 readies the TMA and asks it for tile 1
        mbar_init(full, 1);
        mbar_init(full + 8, 1);
        mbar_init_fence();
        tensormap_acquire(map_q);
        tensormap_acquire(map_kv);
        if (tiles > 1) fetch(1);  // buffer 1 is free from the start
    }
    cp_async_wait<0>();
    fence_proxy_async();  // the copies (ordinary writes) ordered before the tensor cores' reads
    __syncthreads();      // every thread's copies have landed, and the barriers are initialised

    const int warp = threadIdx.x / 32;
    const int row0 = q0 + 16 * warp;
    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ, 1024);

    for (int j = 0; j < tiles; j++) {
        if (j > 0) {
            __syncthreads();  // everyone is done with tile j - 1, whose buffer...
            if (threadIdx.x == 0 && j + 1 < tiles) fetch(j + 1);  // ...takes tile j + 1
            mbar_wait(full + 8 * (j % STAGES), ((j - 1) / STAGES) & 1);  // tile j landed
        }
        const uint32_t sK = sKV + 2 * (j % STAGES) * TILE;
        const uint64_t dk = sw128_desc(sK, 1024), dv = sw128_desc(sK + TILE, 1024);
        if (2 * j + 1 < halves)
            attend<2>(o, m, l, dq, dk, dv, j * BC, row0, j == tiles - 1, sl);
        else
            attend<1>(o, m, l, dq, dk, dv, j * BC, row0, true, sl);
    }
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma and the TMA need sm_90a (a Hopper GPU): see the header
#endif
}
