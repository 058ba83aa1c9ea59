// wgmma_backward.cuh: the per-tile steps of attention_backward 13 and 14 (wgmma, 128 keys a block
// in two 64-key warpgroups, query tiles of 128 in two 64-query halves, HS = 64). Each version's own
// file keeps its loop: the order of these steps, its barriers and waits, and what it does with dQ.
//
// Shared memory as both lay it out (every tile 128-byte swizzled, rows of 64 bf16 = 128 bytes):
// sQ / sG: a query tile of Q / dout (128 rows: two 64-row halves of 8 KB), two buffers each;
// lsD: lse[128] then D[128] (fp32) a buffer; sdS: dS^T as [query half][128 keys][64 queries].
//
// stage_query_tile(tQ, tG, lsD, buf, q_base, g_base, l_row, d_row, rs, C, T, q0, qkv, dout)
//   Queries q0 .. q0 + 127: Q rows (stride rs) into tQ, dout rows (stride C) into tG, their lse
//   (threads 0-127) and D (threads 128-255) into buffer buf of lsD (lsD[256 buf ..]); zeros past
//   T. cp.async, uncommitted.
// products_s_dp(s, dp, descK, descV, tQ, tG)
//   Issues S^T = K Q^T and dP^T = V dout^T for the warpgroup's 64 keys against both query halves
//   (s[hq], dp[hq]: 64 x 64 fp32 accumulators), after a wgmma fence; the caller commits and waits.
// softmax_grads(pa, sa, s, dp, tl, tD, key_r0, q0, T, edge, sl2)
//   P^T = 2^(s sl2 - lse log2 e), zero where key > query or query >= T (tested only when `edge`);
//   dS^T = P^T (dP^T - D); both as bf16 A fragments over the queries (pa, sa [hq][k-step]).
//   key_r0: the key of the thread's accumulator rows e = 0, 1 (e = 2, 3: + 8).
// products_dv_dk(dv, dk, pa, sa, tQ, tG)
//   Issues dV += P^T dout and dK += dS^T Q over the 128 queries (A from registers, dout and Q
//   MN-major), after a wgmma fence; the caller commits.
// store_ds_t(sdS, sa, wg, warp, g, t)
//   The warpgroup's dS^T rows (keys 64 wg + 16 warp + g, + 8) into sdS, half hq at sdS + hq * 16 KB.
// product_dq(dqa, sdS, descK_all, wg, warp, lane)
//   Once both warpgroups' dS^T are in sdS (the caller's barrier): issues dQ = dS K for queries
//   64 wg .. 64 wg + 63 of the tile over all 128 keys, dS read back as A fragments through
//   ldmatrix .trans, K MN-major (descK_all), after a wgmma fence; the caller commits and waits.
// block_sync_256()
//   Both warpgroups wait for each other: named barrier 3, a __syncthreads that leaves barrier 0 to
//   the loop's copies.

#ifndef KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH
#define KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH

#include "bf16.cuh"
#include "mma.cuh"    // cp_async_4, ldmatrix_x4_trans, pack_bf16x2
#include "wgmma.cuh"  // wgmma_ss, wgmma_rs_bt, sw128, sw128_desc, stage_sw128

#define WB_LOG2E 1.4426950408889634f

__device__ __forceinline__ void block_sync_256() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }

// The products exist only in the sm_90a build (as wgmma.cuh's wrappers do); the versions call
// every step inside their own sm_90a guard.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void stage_query_tile(uint32_t tQ, uint32_t tG, float* lsD, int buf, const bf16* q_base,
                                                 const bf16* g_base, const float* l_row, const float* d_row,
                                                 size_t rs, int C, int T, int q0, const bf16* qkv,
                                                 const bf16* dout) {
    stage_sw128<128, 256>(tQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
    stage_sw128<128, 256>(tG, g_base + (size_t)q0 * C, C, T - q0, dout);
    const int r = threadIdx.x % 128;  // lse (threads 0-127) and D (128-255) of the tile's queries
    const bool ok = q0 + r < T;
    const float* src = (threadIdx.x < 128 ? l_row : d_row) + q0 + r;
    cp_async_4(lsD + buf * 256 + threadIdx.x, ok ? src : l_row, ok);
}

__device__ __forceinline__ void products_s_dp(float (&s)[2][8][4], float (&dp)[2][8][4], uint64_t descK,
                                              uint64_t descV, uint32_t tQ, uint32_t tG) {
    wgmma_fence();
#pragma unroll
    for (int hq = 0; hq < 2; hq++) {
        const uint64_t dq_desc = sw128_desc(tQ + hq * 64 * 128, 1024), dg_desc = sw128_desc(tG + hq * 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(s[hq], descK + 2 * kk, dq_desc + 2 * kk, kk > 0);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(dp[hq], descV + 2 * kk, dg_desc + 2 * kk, kk > 0);
    }
}

__device__ __forceinline__ void softmax_grads(uint32_t (&pa)[2][4][4], uint32_t (&sa)[2][4][4],
                                              const float (&s)[2][8][4], const float (&dp)[2][8][4],
                                              const float* tl, const float* tD, int key_r0, int q0, int T,
                                              bool edge, float sl2) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int hq = 0; hq < 2; hq++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int qc = 64 * hq + 8 * n + 2 * t;  // the query column of e = 0 (e = 1: + 1)
            const float2 l2 = *reinterpret_cast<const float2*>(tl + qc);
            const float2 d2 = *reinterpret_cast<const float2*>(tD + qc);
            float p[4], ds[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key_r0 + 8 * (e / 2), q = q0 + qc + (e & 1);
                const float lv = (e & 1) ? l2.y : l2.x, dv_ = (e & 1) ? d2.y : d2.x;
                p[e] = exp2f(fmaf(s[hq][n][e], sl2, -lv * WB_LOG2E));
                if (edge && !(key <= q && q < T)) p[e] = 0.0f;
                ds[e] = p[e] * (dp[hq][n][e] - dv_);
            }
            pa[hq][n / 2][2 * (n % 2) + 0] = pack_bf16x2(p[0], p[1]);
            pa[hq][n / 2][2 * (n % 2) + 1] = pack_bf16x2(p[2], p[3]);
            sa[hq][n / 2][2 * (n % 2) + 0] = pack_bf16x2(ds[0], ds[1]);
            sa[hq][n / 2][2 * (n % 2) + 1] = pack_bf16x2(ds[2], ds[3]);
        }
}

__device__ __forceinline__ void products_dv_dk(float (&dv)[8][4], float (&dk)[8][4], const uint32_t (&pa)[2][4][4],
                                               const uint32_t (&sa)[2][4][4], uint32_t tQ, uint32_t tG) {
    wgmma_fence();
#pragma unroll
    for (int hq = 0; hq < 2; hq++) {
        const uint64_t dq_desc = sw128_desc(tQ + hq * 64 * 128, 1024), dg_desc = sw128_desc(tG + hq * 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dv, pa[hq][kk], dg_desc + 128 * kk);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dk, sa[hq][kk], dq_desc + 128 * kk);
    }
}

__device__ __forceinline__ void store_ds_t(uint32_t sdS, const uint32_t (&sa)[2][4][4], int wg, int warp, int g,
                                           int t) {
    const int r0 = 64 * wg + 16 * warp + g;
#pragma unroll
    for (int hq = 0; hq < 2; hq++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int half = 0; half < 2; half++) {  // n = 2 kk + half: queries 8n + 2t, + 1
                const int chunk = 2 * kk + half;
                const uint32_t at = sdS + hq * 128 * 128 + 4 * t;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + sw128(r0, chunk)), "r"(sa[hq][kk][2 * half]) : "memory");
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + sw128(r0 + 8, chunk)), "r"(sa[hq][kk][2 * half + 1]) : "memory");
            }
}

__device__ __forceinline__ void product_dq(float (&dqa)[8][4], uint32_t sdS, uint64_t descK_all, int wg, int warp,
                                           int lane) {
    uint32_t dsa[8][4];
    const int mi = lane / 8;
    const uint32_t from = sdS + wg * 128 * 128;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int key_row = 16 * kk + (lane % 8) + 8 * (mi / 2);
        ldmatrix_x4_trans(dsa[kk], from + sw128(key_row, 2 * warp + (mi % 2)));
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) wgmma_rs_bt(dqa, dsa[kk], descK_all + 128 * kk, kk > 0);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH
