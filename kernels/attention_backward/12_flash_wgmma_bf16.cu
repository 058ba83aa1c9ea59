/*
title = "bf16 flash backward on Hopper's warpgroup MMA: a warpgroup owns 64 keys, all five products are wgmma"
builds_on = 11
precision = "bf16"
deterministic = false  # dQ is summed over key blocks with float atomics: its last bits vary run to run
changed = """
Version 11's plan (a block owns keys, streams the query tiles past them, dQ by fp32 atomics) with
every product on wgmma (attention_forward 12's building blocks, common/wgmma.cuh):
* A block is two warpgroups, 128 keys; warpgroup w owns keys 64 w .. 64 w + 63. K and V stay in
  shared memory (128-byte swizzled rows), Q, dout, lse and D stream past in 64-query tiles,
  double-buffered by cp.async, one __syncthreads a tile.
* S^T = K Q^T and dP^T = V dout^T: the key-major transposes, both operands K-major in shared memory,
  so the accumulators hold a key per row and a query per column: P^T and dS^T come out of them
  already in the A-fragment layout that dV += P^T dout and dK += dS^T Q take from registers (dout
  and Q read MN-major, as the forward reads V).
* dQ = dS K needs dS with queries as rows: each warp writes its dS^T to shared memory, the
  warpgroup syncs on a named barrier, and ldmatrix .trans reads dS back as A fragments; K is the
  MN-major B. Each warpgroup adds its 64 x 64 share to an fp32 scratch with vector atomics
  (red.global.add.v2.f32), which a last kernel scales into dqkv.
* The softmax's lse and D are per query, so per column here: read from shared memory per tile.
"""
why = """
Version 11 spends its issue slots on ldmatrix and 16 x 8 mma.sync; wgmma does a 64 x 64 x 16 step
in one instruction with both operands fetched by the tensor cores. Only HS = 64, only a Hopper.
Measured (H200, B = 16, T = 1024, NH = 12, the trainer's shape; cuDNN = version 9 in the same
call): 409.0-409.5 us against cuDNN's 282.9-283.9 (1.44x) and versions 10 / 11's 371.6 / 370.8:
slower than mma.sync. Its own time says why (`scratch` timing of the main kernel alone, results
notes): 385 us with the dQ atomics, 241 us without them (wrong results, timing only). Each
warpgroup adds its 64 x 64 share of dQ for every 64-query tile: 113 M fp32 additions at this
shape, twice version 11's, and the L2's atomic units are the bound. Version 13 halves them.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma: a Hopper; elsewhere the workbench refuses it (the build there is a trap)

[scratch]
D = "B * NH * T"   # dout . out per row, fp32
dq = "B * T * C"   # dQ accumulator, fp32, laid out (B, T, NH, HS)

[[launch]]
kernel = "attention_backward12_prep"
grid = "cdiv(B * T * NH, 32)"   # 8 lanes per (b, t, h) row, 32 rows per block
block = 256
args = ["dq", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward12"
grid = ["B * NH", "cdiv(T, 128)"]
block = 256
shared = "1024 + 2 * 128 * 128 + 2 * 2 * 64 * 128 + 128 * 128 + 2 * 2 * 64 * 4"
args = ["dq", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "1.4426950408889634 / sqrt(HS)", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward12_dq"
grid = "cdiv(B * T * C, 8 * 256)"
block = 256
args = ["dqkv", "dq", "B * T", "C", "1.0 / sqrt(HS)"]
*/

#include "attention_backward_bf16.cuh"  // dot_rows, rows_to_bf16, red_add_v2, store_dk_dv
#include "bf16.cuh"
#include "mma.cuh"                       // cp_async_16, ldmatrix_x4_trans, pack_bf16x2, smem_addr
#include "wgmma.cuh"                     // wgmma_ss, wgmma_rs_bt, sw128, sw128_desc, stage_sw128

#define BK 128   // keys a block: two warpgroups of 64
#define BQ 64    // queries a streamed tile
#define HSW 64   // the head size this version is written for
#define LOG2E 1.4426950408889634f

// D = dout . out per (b, h, t) row, and the fp32 dQ accumulator zeroed.
extern "C" __global__ void attention_backward12_prep(float* dq, float* D, const bf16* dout, const bf16* out,
                                                     int B, int T, int NH, int HS) {
    dot_rows(D, dq, dout, out, B, T, NH, HS);
}

// dqkv's q part = bf16(scale * dq).
extern "C" __global__ void attention_backward12_dq(bf16* dqkv, const float* dq, int BT, int C, float scale) {
    rows_to_bf16(dqkv, 3 * C, dq, BT, C, scale);
}

// The 128 threads of warpgroup wg wait for each other (named barriers 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void warpgroup_sync(int wg) {
    if (wg == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(256, 1)
attention_backward12(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
                     int T, int NH, float sl2, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t QT = BQ * 128;                           // a 64-row tile: 8 KB
    const uint32_t sK = base, sV = sK + BK * 128;               // the block's keys and values
    const uint32_t sQ = sV + BK * 128, sG = sQ + 2 * QT;        // Q and dout tiles, two buffers each
    const uint32_t sdS = sG + 2 * QT;                           // dS^T: 128 keys x 64 queries
    const uint32_t sLD = sdS + BK * 128;                        // lse[2][64], D[2][64] (fp32)
    float* lsD = reinterpret_cast<float*>(reinterpret_cast<char*>(smem4) + (sLD - smem_addr(smem4)));

    const int k0 = blockIdx.y * BK;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const bf16* g_base = dout + (size_t)b * T * C + (size_t)h * HSW;
    const float* l_row = lse + (size_t)blockIdx.x * T;  // lse and D are (B, NH, T)
    const float* d_row = D + (size_t)blockIdx.x * T;
    const int first = k0 / BQ, tiles = (T + BQ - 1) / BQ;  // query tiles from the diagonal on

    auto issue = [&](int i) {  // query tile i into buffer i % 2, one cp.async group
        if (i < tiles) {
            const int q0 = i * BQ, buf = i % 2;
            stage_sw128<BQ, 256>(sQ + buf * QT, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
            stage_sw128<BQ, 256>(sG + buf * QT, g_base + (size_t)q0 * C, C, T - q0, dout);
            if (threadIdx.x < 128) {  // lse and D of the tile's queries: 64 + 64 floats
                const int r = threadIdx.x % 64;
                const bool ok = q0 + r < T;
                const float* src = (threadIdx.x < 64 ? l_row : d_row) + q0 + r;
                cp_async_4(lsD + buf * 128 + threadIdx.x, ok ? src : l_row, ok);
            }
        }
        cp_async_commit();
    };
    stage_sw128<BK, 256>(sK, q_base + (size_t)k0 * rs + C, rs, T - k0, qkv);
    stage_sw128<BK, 256>(sV, q_base + (size_t)k0 * rs + 2 * C, rs, T - k0, qkv);
    issue(first);

    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int kw = k0 + 64 * wg;  // this warpgroup's first key
    float dk[8][4], dv[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const uint64_t descK = sw128_desc(sK + 64 * 128 * wg, 1024), descV = sw128_desc(sV + 64 * 128 * wg, 1024);

    for (int i = first; i < tiles; i++) {
        const int q0 = i * BQ, buf = i % 2;
        cp_async_wait<0>();
        fence_proxy_async();  // this thread's copies, visible to the tensor cores
        __syncthreads();      // everyone's copies; and everyone is done with tile i - 1's buffers
        issue(i + 1);
        const uint32_t tQ = sQ + buf * QT, tG = sG + buf * QT;
        const float* tl = lsD + buf * 128;
        const float* tD = tl + 64;

        // S^T = K Q^T and dP^T = V dout^T for this warpgroup's 64 keys: rows keys, columns queries.
        float s[8][4], dp[8][4];
        const uint64_t dq_desc = sw128_desc(tQ, 1024), dg_desc = sw128_desc(tG, 1024);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(s, descK + 2 * kk, dq_desc + 2 * kk, kk > 0);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(dp, descV + 2 * kk, dg_desc + 2 * kk, kk > 0);
        wgmma_commit();
        wgmma_wait<0>();

        // P^T = 2^(s sl2 - lse log2 e), zero where key > query or query >= T; dS^T = P^T (dP^T - D).
        const int key_r0 = kw + 16 * warp + g;  // the key of e = 0, 1 (e = 2, 3: + 8)
        uint32_t pa[4][4], sa[4][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int qc = 8 * n + 2 * t;  // the query column of e = 0 (e = 1: + 1)
            const float2 l2 = *reinterpret_cast<const float2*>(tl + qc);
            const float2 d2 = *reinterpret_cast<const float2*>(tD + qc);
            float p[4], ds[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key_r0 + 8 * (e / 2), q = q0 + qc + (e & 1);
                const float lv = (e & 1) ? l2.y : l2.x, dv_ = (e & 1) ? d2.y : d2.x;
                p[e] = (key <= q && q < T) ? exp2f(fmaf(s[n][e], sl2, -lv * LOG2E)) : 0.0f;
                ds[e] = p[e] * (dp[n][e] - dv_);
            }
            // accumulator n-tile n holds queries 8n .. 8n + 7: half of A k-step n / 2
            pa[n / 2][2 * (n % 2) + 0] = pack_bf16x2(p[0], p[1]);
            pa[n / 2][2 * (n % 2) + 1] = pack_bf16x2(p[2], p[3]);
            sa[n / 2][2 * (n % 2) + 0] = pack_bf16x2(ds[0], ds[1]);
            sa[n / 2][2 * (n % 2) + 1] = pack_bf16x2(ds[2], ds[3]);
        }

        // dV += P^T dout, dK += dS^T Q (A from registers, dout and Q MN-major: 16 queries a k-step).
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dv, pa[kk], dg_desc + 128 * kk);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dk, sa[kk], dq_desc + 128 * kk);
        wgmma_commit();

        // dS^T to shared memory (row = key, 64 queries a row, swizzled), then dS back as A
        // fragments (rows = queries) through ldmatrix .trans, for dQ = dS K over these 64 keys.
        {
            const int r0 = 64 * wg + 16 * warp + g;
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
#pragma unroll
                for (int half = 0; half < 2; half++) {  // n = 2 kk + half: queries 8n + 2t, + 1
                    const int chunk = 2 * kk + half;
                    const uint32_t a0 = sdS + sw128(r0, chunk) + 4 * t, a1 = sdS + sw128(r0 + 8, chunk) + 4 * t;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a0), "r"(sa[kk][2 * half]) : "memory");
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a1), "r"(sa[kk][2 * half + 1]) : "memory");
                }
        }
        warpgroup_sync(wg);  // the warpgroup's dS^T rows are all written
        uint32_t dsa[4][4];       // dS (16 queries of this warp x 16 keys) per k-step
        {
            const int mi = lane / 8;
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const int key_row = 64 * wg + 16 * kk + (lane % 8) + 8 * (mi / 2);
                ldmatrix_x4_trans(dsa[kk], sdS + sw128(key_row, 2 * warp + (mi % 2)));
            }
        }
        float dqa[8][4];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dqa, dsa[kk], descK + 128 * kk, kk > 0);
        wgmma_commit();
        wgmma_wait<0>();  // dV, dK and dQ's share

        const int qr = q0 + 16 * warp + g;  // query of e = 0, 1 (e = 2, 3: + 8)
        float* dq_row = dq + ((size_t)b * T) * C + (size_t)h * HSW;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int ch = 8 * n + 2 * t;
            if (qr < T) red_add_v2(dq_row + (size_t)qr * C + ch, dqa[n][0], dqa[n][1]);
            if (qr + 8 < T) red_add_v2(dq_row + (size_t)(qr + 8) * C + ch, dqa[n][2], dqa[n][3]);
        }
    }
    cp_async_wait<0>();

    store_dk_dv(dqkv, dk, dv, kw + 16 * warp + g, b, h, T, C, scale);  // rows: this warpgroup's keys
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
