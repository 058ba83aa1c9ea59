/*
title = "DRAFT (never run): version 14 with a head's query tiles launched together, for the L2"
builds_on = 14
precision = "bf16"
changed = """
Version 14's grid runs every head's longest query tile first (heads fastest, then tiles): a wave
of 264 blocks touches the K and V of every one of the 192 heads at the trainer's shape (48 MB), so
the later waves read them from DRAM again. Here the blocks of one head come together (the grid's x
runs over a head's query tiles, the longest first; y over the heads): a wave holds ~33 whole heads, 8.4 MB of K and V.
"""
why = """
Nsight Compute on the H100 (results/h100-session10-2026-11-28/call7): version 14 moves DRAM at
49.9% of its peak with an L2 hit rate of 34.2%, cuDNN's forward 27.0% and 56.7%; version 14 takes
111.4 us there against cuDNN's 104.8 (1.09-1.10x at boost clocks, call 3).
"""
preconditions = ["HS == 64"]
arch = "sm_90a"

[[launch]]
kernel = "attention_forward14"
grid = ["cdiv(T, 128)", "B * NH"]   # x (fastest): a head's query tiles together, its longest first
block = 320
shared = "1024 + 128 * 128 + 4 * 2 * 64 * 128 + 128"
args = ["out", "lse", "qkv", "T", "NH", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_fwd_mma.cuh"  // mask_causal, softmax_tile, rescale, store_rows (version 11's)
#include "bf16.cuh"
#include "producers.cuh"          // mbar_init, mbar_arrive, mbar_arrive_on_copies, mbar_wait, produce_tile
#include "mma.cuh"                // cp_async_16, smem_addr
#include "wgmma.cuh"

#define BR 128     // query rows a block: two warpgroups of 64
#define BC 64      // keys a tile
#define HSW 64     // the head size this version is written for
#define STAGES 4   // K/V buffers in the ring
#define CONSUMERS 256
#define PRODUCERS 64  // the producer warps' threads (a multiple of 64)
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif

extern "C" __global__ void __launch_bounds__(CONSUMERS + PRODUCERS, 2)
attention_forward14(bf16* out, float* lse, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t TILE = BC * 128;                         // one K or V tile: 8 KB
    const uint32_t sQ = base, sKV = base + BR * 128;            // buffer s: K at sKV + 2 s TILE, V after it
    const uint32_t bars = sKV + STAGES * 2 * TILE;              // full[STAGES], empty[STAGES], q_full
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };
    const uint32_t q_full = bars + 8 * 2 * STAGES;

    const int q0 = (gridDim.x - 1 - blockIdx.x) * BR;  // a head's tiles together, the longest first
    const int b = blockIdx.y / NH, h = blockIdx.y % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const int tiles = (min(q0 + BR, T) - 1) / BC + 1;  // the block's key tiles, up to its last valid row
    const int live = q0 + 64 < T ? 2 : 1;             // warpgroups with a row below T

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full(s), PRODUCERS);  // each producer lane, once its copies of the tile have landed
            mbar_init(empty(s), 4 * live);  // each consumer warp once its products are done
        }
        mbar_init(q_full, PRODUCERS);
    }
    __syncthreads();  // the only block-wide barrier: the mbarriers exist

    if (threadIdx.x >= CONSUMERS) {  // ---- the two producer warps ----
        // Each lane's copies of a tile are tied to the tile's full barrier: the barrier counts the
        // lane's arrival once they have landed (cp.async.mbarrier.arrive.noinc), so a producer
        // never waits for its own copies, only for free buffers: up to STAGES tiles in flight.
        produce_tile<BR, PRODUCERS, CONSUMERS>(sQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
        mbar_arrive_on_copies(q_full);
        for (int i = 0; i < tiles; i++) {
            const int s = i % STAGES;
            if (i >= STAGES) mbar_wait(empty(s), (i / STAGES - 1) & 1);  // tile i - STAGES released
            const bf16* k_src = q_base + (size_t)i * BC * rs + C;
            produce_tile<BC, PRODUCERS, CONSUMERS>(sKV + 2 * s * TILE, k_src, rs, T - i * BC, qkv);
            produce_tile<BC, PRODUCERS, CONSUMERS>(sKV + 2 * s * TILE + TILE, k_src + C, rs, T - i * BC, qkv);
            mbar_arrive_on_copies(full(s));
        }
        cp_async_wait<0>();  // nothing in flight when the warps exit
        return;
    }

    // ---- the two consumer warpgroups ----
    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int qw = q0 + 64 * wg;        // this warpgroup's first row
    const int row0 = qw + 16 * warp;    // this warp's first row
    const int mine = qw < T ? qw / BC + 1 : 0;  // key tiles up to its diagonal (the only one masked)

    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ + 64 * 128 * wg, 1024);
    if (mine > 0) mbar_wait(q_full, 0);

    for (int j = 0; j < mine; j++) {
        const int s = j % STAGES;
        const uint32_t sK = sKV + 2 * s * TILE, sV = sK + TILE;
        mbar_wait(full(s), (j / STAGES) & 1);
        fence_proxy_async();  // the landed copies (ordinary writes), ordered before the tensor cores' reads
        float sc[1][8][4], alpha[1][2];
        uint32_t p[1][4][4];
        const uint64_t dk = sw128_desc(sK, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(sc[0], dq + 2 * kk, dk + 2 * kk, kk > 0);  // +32 bytes a step
        wgmma_commit();
        wgmma_wait<0>();  // S (this warpgroup's P V of the last tile is done already)
        if (j > 0 && lane == 0) mbar_arrive(empty((j - 1) % STAGES));  // tile j - 1: this warp is done
        if (j == mine - 1) mask_causal<1>(sc, j * BC, row0);
        if (softmax_tile<1>(sc, p, m, l, alpha, sl, RESCALE_SLACK)) rescale<1, 8>(o, alpha);
        const uint64_t dv = sw128_desc(sV, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(o[0], p[0][kk], dv + 128 * kk);  // +2048 bytes: 16 keys
        wgmma_commit();
        wgmma_wait<0>();  // at once: a P V still in flight past here made ptxas serialise every wgmma
    }
    // A warpgroup never releases its last tile (nor WG 0 the block's last, past its diagonal): the
    // producers wait only for tiles up to tiles - 1 - STAGES, which every live warpgroup releases
    // in its loop (it releases tile j - 1 at tile j, up to mine - 2 >= tiles - 3).
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
