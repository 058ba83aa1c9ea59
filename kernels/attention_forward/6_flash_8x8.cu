/*
title = "Flash attention in fp32 with 128-row query tiles and 8 x 8 register micro-tiles"
builds_on = 5
changed = "Each block now owns 128 query rows with 128 threads; a thread holds an 8 x 8 block of scores and an 8 x 8 block of the output (64 + 64 accumulators), so every float4 from shared memory feeds 32 FMAs instead of 16."
why = """
In version 5 a thread loads 8 float4s from shared memory for 64 FMAs (S) and again for PV: one
128-bit load per 8 FMAs, and a warp-wide LDS.128 moves 512 B, which at 128 B per clock per SM
keeps the shared-memory pipe about as busy as the FP32 pipes, so neither runs at full rate.
Doubling the micro-tile to 8 x 8 halves the loads per FMA (16 float4s for 256 FMAs), the same
step that takes a hand-written SGEMM from ~50% to ~80% of peak. The larger query tile also halves
how often each K/V tile is fetched from L2 (T/128 instead of T/64 times per head). Costs: 254
registers a thread on sm_90, without spills (128 threads, 2 blocks per SM, 8 warps: latency is
hidden by the 64 independent accumulators rather than by warps), and the diagonal work grows a
little (two partly masked key tiles per query tile).
Layout, again conflict-free: a thread's score columns are tx + 8 j (tx < 8), so a quarter-warp's
8 lanes read 8 consecutive key rows of stride 68 (all 32 banks); its output channels are
4 tx .. 4 tx + 3 and 32 + 4 tx .. 32 + 4 tx + 3 (32 consecutive floats per quarter-warp); the
8 lanes sharing a score row are adjacent, so row reductions take 3 shuffles; P rows have stride
72, so the 4 rows a warp writes at once fall in 4 different groups of 8 banks.
"""
preconditions = ["HS <= 64", "HS % 4 == 0"]

[[launch]]
kernel = "attention_forward6"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "4 * (128 * 68 + 64 * 68 + 64 * 64 + 128 * 72)"
args = ["out", "lse", "qkv", "B", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]
*/

#include "reduce.cuh"  // warp_max<8>, warp_sum<8>: over the quarter-warp that shares a row

#define BR 128
#define BC 64
#define DP 64
#define QK_STRIDE 68
#define V_STRIDE 64
#define P_STRIDE 72
#define THREADS 128

extern "C" __global__ void __launch_bounds__(THREADS)
attention_forward6(float* out, float* lse, const float* qkv, int B, int T, int NH, int HS, float qscale) {
    extern __shared__ float4 smem4[];
    float* Qs = reinterpret_cast<float*>(smem4);
    float* Ks = Qs + BR * QK_STRIDE;
    float* Vs = Ks + BC * QK_STRIDE;
    float* Ps = Vs + BC * V_STRIDE;
    const int tid = threadIdx.x, tx = tid % 8, ty = tid / 8;  // ty in 0..15
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int C = NH * HS, hs4 = HS / 4;
    const size_t rs = 3 * (size_t)C;
    const float* base = qkv + (size_t)b * T * rs + (size_t)h * HS;

    for (int i = tid; i < BR * (DP / 4); i += THREADS) {
        int r = i / (DP / 4), c4 = i % (DP / 4);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + r < T && c4 < hs4) {
            v = *reinterpret_cast<const float4*>(base + (size_t)(q0 + r) * rs + 4 * c4);
            v.x *= qscale; v.y *= qscale; v.z *= qscale; v.w *= qscale;
        }
        *reinterpret_cast<float4*>(Qs + r * QK_STRIDE + 4 * c4) = v;
    }

    // Rows q0 + ty + 16 i (i < 8); score columns k0 + tx + 8 j (j < 8);
    // output channels 4 tx + e (e < 4) and 32 + 4 tx + e (stored as o[i][4 + e]).
    float o[8][8], m[8], l[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) o[i][e] = 0.0f;
    }

    const int kv_end = min(T, q0 + BR);
    for (int k0 = 0; k0 < kv_end; k0 += BC) {
        __syncthreads();
        for (int i = tid; i < BC * (DP / 4); i += THREADS) {
            int r = i / (DP / 4), c4 = i % (DP / 4);
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (k0 + r < T && c4 < hs4) {
                const float* row = base + (size_t)(k0 + r) * rs + 4 * c4;
                kv = *reinterpret_cast<const float4*>(row + C);
                vv = *reinterpret_cast<const float4*>(row + 2 * C);
            }
            *reinterpret_cast<float4*>(Ks + r * QK_STRIDE + 4 * c4) = kv;
            *reinterpret_cast<float4*>(Vs + r * V_STRIDE + 4 * c4) = vv;
        }
        __syncthreads();

        float s[8][8];
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) s[i][j] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < DP; d += 4) {
            float4 kf[8];
#pragma unroll
            for (int j = 0; j < 8; j++) kf[j] = *reinterpret_cast<const float4*>(Ks + (tx + 8 * j) * QK_STRIDE + d);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float4 qf = *reinterpret_cast<const float4*>(Qs + (ty + 16 * i) * QK_STRIDE + d);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    s[i][j] = fmaf(qf.x, kf[j].x, s[i][j]);
                    s[i][j] = fmaf(qf.y, kf[j].y, s[i][j]);
                    s[i][j] = fmaf(qf.z, kf[j].z, s[i][j]);
                    s[i][j] = fmaf(qf.w, kf[j].w, s[i][j]);
                }
            }
        }
        if (k0 + BC - 1 > q0) {  // the tile reaches above the diagonal of some row
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++)
                    if (k0 + tx + 8 * j > q0 + ty + 16 * i) s[i][j] = -INFINITY;
        }

        // Online softmax. A row may see no key of a tile (the second key tile of the first 64
        // rows of the block): its tile max is -inf, but its running max is already finite
        // (key k0 = 0 was visible in the first tile), so nothing turns into NaN.
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float mx = s[i][0];
#pragma unroll
            for (int j = 1; j < 8; j++) mx = fmaxf(mx, s[i][j]);
            mx = warp_max<8>(mx);
            float mnew = fmaxf(m[i], mx);
            float alpha = exp2f(m[i] - mnew);
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                s[i][j] = exp2f(s[i][j] - mnew);
                sum += s[i][j];
            }
            l[i] = l[i] * alpha + sum;
            m[i] = mnew;
#pragma unroll
            for (int e = 0; e < 8; e++) o[i][e] *= alpha;
        }

        // P rows are read only by the 8 lanes that wrote them (one quarter of a warp).
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) Ps[(ty + 16 * i) * P_STRIDE + tx + 8 * j] = s[i][j];
        __syncwarp();

#pragma unroll 2
        for (int c = 0; c < BC; c += 4) {
            float4 va[4], vb[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                va[u] = *reinterpret_cast<const float4*>(Vs + (c + u) * V_STRIDE + 4 * tx);
                vb[u] = *reinterpret_cast<const float4*>(Vs + (c + u) * V_STRIDE + 32 + 4 * tx);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float4 pf = *reinterpret_cast<const float4*>(Ps + (ty + 16 * i) * P_STRIDE + c);
                float p[4] = {pf.x, pf.y, pf.z, pf.w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    o[i][0] = fmaf(p[u], va[u].x, o[i][0]);
                    o[i][1] = fmaf(p[u], va[u].y, o[i][1]);
                    o[i][2] = fmaf(p[u], va[u].z, o[i][2]);
                    o[i][3] = fmaf(p[u], va[u].w, o[i][3]);
                    o[i][4] = fmaf(p[u], vb[u].x, o[i][4]);
                    o[i][5] = fmaf(p[u], vb[u].y, o[i][5]);
                    o[i][6] = fmaf(p[u], vb[u].z, o[i][6]);
                    o[i][7] = fmaf(p[u], vb[u].w, o[i][7]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 8; i++) {
        float lt = l[i];
        lt = warp_sum<8>(lt);
        int r = q0 + ty + 16 * i;
        if (r < T) {
            float inv = 1.0f / lt;
            float* dst = out + ((size_t)b * T + r) * C + (size_t)h * HS;
            if (4 * tx < HS)
                *reinterpret_cast<float4*>(dst + 4 * tx) =
                    make_float4(o[i][0] * inv, o[i][1] * inv, o[i][2] * inv, o[i][3] * inv);
            if (32 + 4 * tx < HS)
                *reinterpret_cast<float4*>(dst + 32 + 4 * tx) =
                    make_float4(o[i][4] * inv, o[i][5] * inv, o[i][6] * inv, o[i][7] * inv);
            if (tx == 0) lse[(size_t)bh * T + r] = (m[i] + log2f(lt)) * 0.6931471805599453f;
        }
    }
}
