/*
title = "bf16 wgmma flash attention: one warpgroup a block, 128 keys a tile, three blocks an SM"
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

#include "attention_fwd_mma.cuh"  // store_rows (version 11's)
#include "bf16.cuh"
#include "producers.cuh"          // produce_tile (version 13's copy, here by all 128 threads)
#include "mma.cuh"                // cp_async_16, smem_addr
#include "softmax_128_keys.cuh"   // attend (a tile's S, online softmax and P V), block_query_tile
#include "wgmma.cuh"

#define BR 64      // query rows a block: one warpgroup
#define BC 128     // keys a tile: two halves of 64
#define HSW 64     // the head size this version is written for
#define STAGES 2   // K/V buffers: tile j + 1 is fetched while tile j is computed
#define THREADS 128   // one warpgroup, which fetches its own tiles
#ifndef HEAD_GROUP
#define HEAD_GROUP 24  // heads whose query tiles run together (see the block's remap)
#endif
extern "C" __global__ void __launch_bounds__(THREADS, 3)
attention_forward15(bf16* out, float* lse, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t TILE = BC * 128;                         // one K or V tile: 16 KB (two halves of 8)
    const uint32_t sQ = base, sKV = base + BR * 128;            // buffer s: K at sKV + 2 s TILE, V after it

    int bh, q0;
    block_query_tile<HEAD_GROUP, BR>(bh, q0);  // HEAD_GROUP heads' query tiles together, the longest first
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
        if (j + 1 < tiles) fetch(j + 1);  // ...takes tile j + 1 while tile j is computed
        fence_proxy_async();  // the landed copies (ordinary writes), ordered before the tensor cores' reads
        const uint32_t sK = sKV + 2 * (j % STAGES) * TILE;
        const uint64_t dk = sw128_desc(sK, 1024), dv = sw128_desc(sK + TILE, 1024);
        if (2 * j + 1 < halves)
            attend<2>(o, m, l, dq, dk, dv, j * BC, row0, j == tiles - 1, sl);
        else
            attend<1>(o, m, l, dq, dk, dv, j * BC, row0, true, sl);
    }
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
