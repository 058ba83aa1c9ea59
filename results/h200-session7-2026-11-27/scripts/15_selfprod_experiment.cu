/*
title = "bf16 wgmma flash attention, the warpgroups decoupled: every thread copies, mbarriers instead of block barriers"
builds_on = 12
precision = "bf16"
changed = """
Version 12 with its per-tile __syncthreads replaced by a ring of mbarriers.
"""
why = """
Experiment.
"""
preconditions = ["HS == 64"]

[[launch]]
kernel = "attention_forward15"
grid = ["B * NH", "cdiv(T, 128)"]
block = 256
shared = "1024 + 128 * 128 + 4 * 2 * 64 * 128 + 128"
args = ["out", "lse", "qkv", "T", "NH", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_fwd_mma.cuh"
#include "bf16.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

#define BR 128
#define BC 64
#define HSW 64
#define STAGES 4
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif

// ---- mbarriers (shared-memory objects that count arrivals and flip a phase bit when the count
// is reached; a waiter names the parity of the phase it waits to see completed) -----------------
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives once every cp.async this thread issued before it has landed (noinc: that arrival is one
// of the count the barrier was initialised with).
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// This warpgroup's half of a tile: its 128 threads copy rows [half * ROWS / 2, (half + 1) * ROWS / 2).
template <int ROWS>
__device__ __forceinline__ void stage_half(uint32_t dst, const bf16* src, size_t rs, int valid, const bf16* any, int half) {
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int k = 0; k < ROWS * 4 / 128; k++) {
        const int i = t + 128 * k + half * ROWS * 4, r = i / 8, c = i % 8;
        const bool ok = r < valid;
        cp_async_16(dst + sw128(r, c), ok ? src + r * rs + 8 * c : any, ok);
    }
}

extern "C" __global__ void __launch_bounds__(256, 2)
attention_forward15(bf16* out, float* lse, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;
    constexpr uint32_t TILE = BC * 128;
    const uint32_t sQ = base, sKV = base + BR * 128;
    const uint32_t bars = sKV + STAGES * 2 * TILE;  // full[STAGES], empty[STAGES], q_full[2]
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (STAGES + s); };

    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const int tiles = (min(q0 + BR, T) - 1) / BC + 1;
    const int live = q0 + 64 < T ? 2 : 1;
    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const uint32_t q_full = bars + 8 * (2 * STAGES + wg);

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full(s), 256);
            mbar_init(empty(s), 4 * live);
        }
        mbar_init(bars + 8 * 2 * STAGES, 128);
        mbar_init(bars + 8 * (2 * STAGES + 1), 128);
    }
    __syncthreads();

    auto issue = [&](int i) {  // this warpgroup's half of tile i, once tile i - STAGES is released
        const int s = i % STAGES;
        if (i >= STAGES) mbar_wait(empty(s), (i / STAGES - 1) & 1);
        const bf16* k_src = q_base + (size_t)i * BC * rs + C;
        stage_half<BC>(sKV + 2 * s * TILE, k_src, rs, T - i * BC, qkv, wg);
        stage_half<BC>(sKV + 2 * s * TILE + TILE, k_src + C, rs, T - i * BC, qkv, wg);
        mbar_arrive_on_copies(full(s));
    };
    // Q: each warpgroup copies its own 64 rows.
    stage_half<BR>(sQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv, wg);
    mbar_arrive_on_copies(q_full);
    issue(0);
    if (tiles > 1) issue(1);

    const int qw = q0 + 64 * wg, row0 = qw + 16 * warp;
    const int mine = qw < T ? qw / BC + 1 : 0;
    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ + 64 * 128 * wg, 1024);
    mbar_wait(q_full, 0);

    for (int j = 0; j < tiles; j++) {
        if (j + 2 < tiles) issue(j + 2);
        if (j < mine) {
            const int s = j % STAGES;
            const uint32_t sK = sKV + 2 * s * TILE, sV = sK + TILE;
            mbar_wait(full(s), (j / STAGES) & 1);
            fence_proxy_async();
            float sc[1][8][4], alpha[1][2];
            uint32_t p[1][4][4];
            const uint64_t dk = sw128_desc(sK, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_ss(sc[0], dq + 2 * kk, dk + 2 * kk, kk > 0);
            wgmma_commit();
            wgmma_wait<0>();
            if (j > 0 && lane == 0) mbar_arrive(empty((j - 1) % STAGES));
            if (j == mine - 1) mask_causal<1>(sc, j * BC, row0);
            if (softmax_tile<1>(sc, p, m, l, alpha, sl, RESCALE_SLACK)) rescale<1, 8>(o, alpha);
            const uint64_t dv = sw128_desc(sV, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(o[0], p[0][kk], dv + 128 * kk);
            wgmma_commit();
        }
    }
    wgmma_wait<0>();
    cp_async_wait<0>();
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();
#endif
}
