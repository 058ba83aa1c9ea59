/*
title = "bf16 flash attention on Hopper's warpgroup MMA: wgmma reads Q, K and V from swizzled shared memory, P stays in registers"
builds_on = 11
precision = "bf16"
changed = """
Version 11's tiles and softmax, with the products moved from mma.sync to wgmma (sm_90a):
* A block is two warpgroups (256 threads), 64 query rows each, 128 rows in all; key tiles of 64.
* S = Q K^T is four wgmma m64n64k16 (one per 16 channels), both operands read by the tensor cores
  from shared memory: no ldmatrix, no Q or K fragments in registers.
* O += P V is four more, P as the A operand straight from the softmax's registers (the
  accumulator's layout is the A fragment's), V from shared memory as it came from global memory
  (MN-major: the instruction transposes it).
* The tiles are stored in wgmma's 128-byte swizzle (rows of 128 bytes, chunk c of row r at chunk
  c ^ (r % 8)) instead of version 11's padded rows; cp.async writes them into four K/V buffers.
* P V is not waited for at the end of its tile: it runs on through the next tile's barrier and is
  waited for with that tile's S. So one barrier a tile, and four buffers: tile j being read, j - 1
  still read by P V, j + 1 landing, j + 2 being issued.
The mask, the softmax with its lazy rescaling and the epilogue are version 11's helpers, unchanged:
the accumulator of a warp is laid out like eight mma.sync accumulators (wgmma.cuh).
"""
why = """
mma.sync tops out near two thirds of Hopper's tensor rate: each m16n8k16 moves its operands
through registers (ldmatrix for every K and V fragment, 40 x4 loads a tile in version 11) and the
warp issues 64 of them a tile. wgmma does a tile's S in 4 instructions a warpgroup, reading
shared memory itself, and is asynchronous: a warpgroup's softmax (MUFU and FFMA work) runs while
another's products are on the tensor cores. Four warpgroups share an SM (two blocks of 82 KB,
at most 128 registers a thread; ptxas uses 102). Only HS = 64 (the trainer's head) is written;
other heads are outside its preconditions. It needs a Hopper (arch below): the workbench refuses
it on any other device, where its build is a stub that traps.
Measured (H200, B = 16, T = 1024, NH = 12: the trainer's shape): 101-102 us against version 11's
121.6 and cuDNN's (version 9) 87.3: 1.16x cuDNN's time, from 1.39x. What did not help is in
results/notes/attention_forward.md.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma: a Hopper; elsewhere the workbench refuses it (the build there is a trap)

[[launch]]
kernel = "attention_forward12"
grid = ["B * NH", "cdiv(T, 128)"]
block = 256
shared = "1024 + 128 * 128 + 4 * 2 * 64 * 128"
args = ["out", "lse", "qkv", "T", "NH", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_fwd_mma.cuh"  // mask_causal, softmax_tile, rescale, store_rows (version 11's)
#include "bf16.cuh"
#include "mma.cuh"                // cp_async_16, smem_addr, pack_bf16x2
#include "wgmma.cuh"

#define BR 128  // query rows a block: two warpgroups of 64
#define BC 64   // keys a tile
#define HSW 64  // the head size this version is written for
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif
#define STAGES 4  // K/V buffers: tile j read, j - 1 still read by P V, j + 1 landing, j + 2 issued (the header's shared size counts 4)

extern "C" __global__ void __launch_bounds__(256, 2)
attention_forward12(bf16* out, float* lse, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    const uint32_t sQ = base, sKV = base + BR * 128;            // stage s: K at sKV + 2 s BC 128, V after it
    constexpr uint32_t TILE = BC * 128;

    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest query tiles first
    const int qw = q0 + 64 * wg;                       // this warpgroup's first row
    const int row0 = qw + 16 * warp;                   // this warp's first row
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    // Key tiles: the block's, up to its last valid row; the warpgroup's, up to its diagonal tile
    // (the only one it masks). A warpgroup past T has none (it keeps the barriers).
    const int tiles = (min(q0 + BR, T) - 1) / BC + 1;
    const int mine = qw < T ? qw / BC + 1 : 0;

    // Copy group i carries tile i (K and V), into buffers i % STAGES; group 0 also Q. Tile i + 2
    // is issued in iteration i, after that iteration's barrier: every warpgroup has then waited for
    // its products of tile i - 1 and before, so buffers (i + 2) % 4 = (i - 2) % 4 are free.
    auto issue = [&](int i) {
        if (i < tiles) {
            const uint32_t dst = sKV + i % STAGES * 2 * TILE;
            const bf16* k_src = q_base + (size_t)i * BC * rs + C;
            stage_sw128<BC, 256>(dst, k_src, rs, T - i * BC, qkv);
            stage_sw128<BC, 256>(dst + TILE, k_src + C, rs, T - i * BC, qkv);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps the wait counts constant
    };
    stage_sw128<BR, 256>(sQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
    for (int i = 0; i < STAGES - 2; i++) issue(i);

    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ + 64 * 128 * wg, 1024);

    for (int j = 0; j < tiles; j++) {
        const uint32_t sK = sKV + j % STAGES * 2 * TILE, sV = sK + TILE;
        cp_async_wait<STAGES - 3>();  // group j (tile j) has landed, this thread's part; j + 1 may fly
        fence_proxy_async();  // this thread's copies, visible to the tensor cores' reads
        __syncthreads();      // every thread's part; and every warpgroup is done with tile j - 2
        issue(j + STAGES - 2);
        if (j < mine) {  // uniform over the warpgroup, as wgmma needs
            float s[1][8][4], alpha[1][2];
            uint32_t p[1][4][4];
            const uint64_t dk = sw128_desc(sK, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_ss(s[0], dq + 2 * kk, dk + 2 * kk, kk > 0);  // +32 bytes a step
            wgmma_commit();
            wgmma_wait<0>();  // S, and the previous tile's P V (o is rescaled next)
            if (j == mine - 1) mask_causal<1>(s, j * BC, row0);
            if (softmax_tile<1>(s, p, m, l, alpha, sl, RESCALE_SLACK)) rescale<1, 8>(o, alpha);
            const uint64_t dv = sw128_desc(sV, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(o[0], p[0][kk], dv + 128 * kk);  // +2048 bytes: 16 keys
            wgmma_commit();  // not waited for here: it runs on while the next tile's copies land
        } else {
            wgmma_wait<0>();  // past its diagonal: its last P V must be done before the next barrier
        }
    }
    wgmma_wait<0>();
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
