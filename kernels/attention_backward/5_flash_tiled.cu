/*
title = "Flash-style fp32 backward: a block per 64-key tile, no T x T buffer, dq by atomics"
builds_on = 4
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "No scratch matrices and no permutes. A first kernel computes D = dout . out per row and zeroes dq; the main kernel gives each block 64 keys of one head (K and V staged once) and walks the 64-row query tiles from the diagonal down, recomputing S and P, forming dP and dS in registers, accumulating dK and dV in registers, and adding each tile's dQ contribution with atomics."
why = """
The cuBLAS versions move the two (B, NH, T, T) matrices through DRAM several times (~3 GB at the
default sizes) and do the masked upper triangle in all five GEMMs. Here scores live only in
registers and shared memory, only tiles on or below the diagonal are visited, and DRAM sees
roughly qkv, dout, out and dqkv once (plus L2-resident re-reads of Q and dout per key tile). Per
(key tile, query tile) pair a block does five 64 x 64 x 64 products (S = Q K^T, dP = dout V^T,
dV += P^T dout, dK += dS^T Q, dQ = dS K) from float4 shared loads with 4 x 4 register
micro-tiles, like the forward's version 5. dK and dV are owned by the block and stored once;
dQ rows get contributions from every key tile, so they are summed with atomicAdd into dqkv
(zeroed by the first kernel, which is why dqkv needs no memset). P and dS are handed between
phases transposed (P^T, dS^T) so that each phase reads float4s along its reduction axis.
D = dout . out replaces the row sum of P dP (equal when out comes from the same forward), so no
pass over a whole row is needed. Q is staged pre-multiplied by scale * log2(e) and lse by
log2(e), so P = 2^(s - lse') is one ex2; dK is divided by log2(e) at the end to undo it.
Key tiles are scheduled longest first (the first tiles of a sequence see the most queries).
"""
preconditions = ["HS <= 64", "HS % 4 == 0"]
block_sizes = [128, 256]   # of the small first kernel (a warp per row)

[scratch]
D = "B * NH * T"

[[launch]]
kernel = "attention_backward_prep5"
grid = "cdiv(B * T * NH, block_size // 32)"
block = "block_size"
args = ["dqkv", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward5"
grid = ["B * NH", "cdiv(T, 64)"]
block = 256
shared = "4 * (6 * 64 * 68 + 2 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]
*/

#include "reduce.cuh"  // warp_sum

#define TILE 64     // keys per block and queries per step
#define DP 64       // head channels, zero-padded to 64 in shared memory
#define STRIDE 68   // floats per shared row: 8 consecutive rows start on 8 different bank quads
#define THREADS 256
#define LOG2E 1.4426950408889634f

// D[b, h, t] = dout[b, t, h, :] . out[b, t, h, :], and dq[b, t, h, :] = 0 (a warp per (b, t, h)).
extern "C" __global__ void attention_backward_prep5(float* dqkv, float* D, const float* dout, const float* out,
                                                    int B, int T, int NH, int HS) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= B * T * NH) return;  // whole warps leave together
    int h = row % NH;
    size_t bt = row / NH;
    int t = bt % T, b = bt / T;
    size_t C = (size_t)NH * HS;
    const float* o = out + bt * C + (size_t)h * HS;
    const float* g = dout + bt * C + (size_t)h * HS;
    float* dq = dqkv + bt * 3 * C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = lane; d < HS; d += 32) {
        s = fmaf(o[d], g[d], s);
        dq[d] = 0.0f;
    }
    s = warp_sum(s);
    if (lane == 0) D[((size_t)b * NH + h) * T + t] = s;
}

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
    return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc))));
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
attention_backward5(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                    int B, int T, int NH, int HS, float scale) {
    extern __shared__ float4 smem4[];
    float* Ks = reinterpret_cast<float*>(smem4);  // this block's keys            [c][d]
    float* Vs = Ks + TILE * STRIDE;               // and values                  [c][d]
    float* Qs = Vs + TILE * STRIDE;               // current queries, scaled      [r][d]
    float* Gs = Qs + TILE * STRIDE;               // current dout rows            [r][d]
    float* PT = Gs + TILE * STRIDE;               // P transposed                 [c][r]
    float* ST = PT + TILE * STRIDE;               // dS transposed                [c][r]
    float* Ls = ST + TILE * STRIDE;               // lse * log2(e) of the current queries
    float* Dl = Ls + TILE;                        // D of the current queries
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * TILE;  // low blockIdx.y = early keys = the most query tiles: launched first
    const int C = NH * HS, hs4 = HS / 4;
    const size_t rs = 3 * (size_t)C;
    const float qscale = scale * LOG2E;
    const float* base = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const float* gbase = dout + (size_t)b * T * C + (size_t)h * HS;

    for (int i = tid; i < TILE * (DP / 4); i += THREADS) {
        int r = i / (DP / 4), c4 = i % (DP / 4);
        float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
        if (k0 + r < T && c4 < hs4) {
            const float* row = base + (size_t)(k0 + r) * rs + 4 * c4;
            kv = *reinterpret_cast<const float4*>(row + C);
            vv = *reinterpret_cast<const float4*>(row + 2 * C);
        }
        *reinterpret_cast<float4*>(Ks + r * STRIDE + 4 * c4) = kv;
        *reinterpret_cast<float4*>(Vs + r * STRIDE + 4 * c4) = vv;
    }

    // dK, dV rows k0 + ty + 16 a, channels 4 tx + e
    float dk[4][4], dv[4][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[a][e] = dv[a][e] = 0.0f;

    for (int q0 = k0; q0 < T; q0 += TILE) {  // query tiles on or below the diagonal
        __syncthreads();  // the previous query tile's Q, dout, P^T, dS^T are consumed (K, V staged)
        for (int i = tid; i < TILE * (DP / 4); i += THREADS) {
            int r = i / (DP / 4), c4 = i % (DP / 4);
            float4 qv = make_float4(0.f, 0.f, 0.f, 0.f), gv = qv;
            if (q0 + r < T && c4 < hs4) {
                qv = *reinterpret_cast<const float4*>(base + (size_t)(q0 + r) * rs + 4 * c4);
                qv.x *= qscale; qv.y *= qscale; qv.z *= qscale; qv.w *= qscale;
                gv = *reinterpret_cast<const float4*>(gbase + (size_t)(q0 + r) * C + 4 * c4);
            }
            *reinterpret_cast<float4*>(Qs + r * STRIDE + 4 * c4) = qv;
            *reinterpret_cast<float4*>(Gs + r * STRIDE + 4 * c4) = gv;
        }
        if (tid < TILE) {
            bool in = q0 + tid < T;
            Ls[tid] = in ? lse[(size_t)bh * T + q0 + tid] * LOG2E : 0.0f;
            Dl[tid] = in ? D[(size_t)bh * T + q0 + tid] : 0.0f;
        }
        __syncthreads();

        // S (base 2) and dP for query rows ty + 16 i, key columns tx + 16 j
        float s[4][4], dp[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = dp[i][j] = 0.0f;
        // Two passes over d rather than one: only one operand tile's float4s are live at a time,
        // which keeps the kernel within 128 registers (2 blocks per SM) without spilling.
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            float4 kf[4];
#pragma unroll
            for (int j = 0; j < 4; j++) kf[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * STRIDE + d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 qf = *reinterpret_cast<const float4*>(Qs + (ty + 16 * i) * STRIDE + d);
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = dot4(qf, kf[j], s[i][j]);
            }
        }
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            float4 vf[4];
#pragma unroll
            for (int j = 0; j < 4; j++) vf[j] = *reinterpret_cast<const float4*>(Vs + (tx + 16 * j) * STRIDE + d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 gf = *reinterpret_cast<const float4*>(Gs + (ty + 16 * i) * STRIDE + d);
#pragma unroll
                for (int j = 0; j < 4; j++) dp[i][j] = dot4(gf, vf[j], dp[i][j]);
            }
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int rl = ty + 16 * i, r = q0 + rl;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int cl = tx + 16 * j, c = k0 + cl;
                // causal (c <= r; keys past T are past every valid query) and valid rows only
                float p = (r < T && c <= r) ? exp2f(s[i][j] - Ls[rl]) : 0.0f;
                PT[cl * STRIDE + rl] = p;
                ST[cl * STRIDE + rl] = p * (dp[i][j] - Dl[rl]);
            }
        }
        __syncthreads();

        // dV += P^T dout and dK += dS^T Q (Q still scaled): rows ty + 16 a of this block's keys
#pragma unroll 4
        for (int r = 0; r < TILE; r += 4) {
            float4 gf[4], qf[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                gf[u] = *reinterpret_cast<const float4*>(Gs + (r + u) * STRIDE + 4 * tx);
                qf[u] = *reinterpret_cast<const float4*>(Qs + (r + u) * STRIDE + 4 * tx);
            }
#pragma unroll
            for (int a = 0; a < 4; a++) {
                float4 pf = *reinterpret_cast<const float4*>(PT + (ty + 16 * a) * STRIDE + r);
                float4 sf = *reinterpret_cast<const float4*>(ST + (ty + 16 * a) * STRIDE + r);
                float pa[4] = {pf.x, pf.y, pf.z, pf.w}, sa[4] = {sf.x, sf.y, sf.z, sf.w};
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    dv[a][0] = fmaf(pa[u], gf[u].x, dv[a][0]);
                    dv[a][1] = fmaf(pa[u], gf[u].y, dv[a][1]);
                    dv[a][2] = fmaf(pa[u], gf[u].z, dv[a][2]);
                    dv[a][3] = fmaf(pa[u], gf[u].w, dv[a][3]);
                    dk[a][0] = fmaf(sa[u], qf[u].x, dk[a][0]);
                    dk[a][1] = fmaf(sa[u], qf[u].y, dk[a][1]);
                    dk[a][2] = fmaf(sa[u], qf[u].z, dk[a][2]);
                    dk[a][3] = fmaf(sa[u], qf[u].w, dk[a][3]);
                }
            }
        }

        // dQ rows 4 ty + a (contiguous, so dS^T gives them as one float4), channels 4 tx + e
        float dq[4][4];
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int e = 0; e < 4; e++) dq[a][e] = 0.0f;
#pragma unroll 8
        for (int c = 0; c < TILE; c++) {
            float4 sf = *reinterpret_cast<const float4*>(ST + c * STRIDE + 4 * ty);
            float4 kf = *reinterpret_cast<const float4*>(Ks + c * STRIDE + 4 * tx);
            float sa[4] = {sf.x, sf.y, sf.z, sf.w};
#pragma unroll
            for (int a = 0; a < 4; a++) {
                dq[a][0] = fmaf(sa[a], kf.x, dq[a][0]);
                dq[a][1] = fmaf(sa[a], kf.y, dq[a][1]);
                dq[a][2] = fmaf(sa[a], kf.z, dq[a][2]);
                dq[a][3] = fmaf(sa[a], kf.w, dq[a][3]);
            }
        }
        if (4 * tx < HS) {
#pragma unroll
            for (int a = 0; a < 4; a++) {
                int r = q0 + 4 * ty + a;
                if (r >= T) break;
                float* dst = dqkv + ((size_t)b * T + r) * rs + (size_t)h * HS + 4 * tx;
#pragma unroll
                for (int e = 0; e < 4; e++) atomicAdd(dst + e, dq[a][e] * scale);
            }
        }
    }

    // dK = scale * sum dS^T q = (sum dS^T Qs) / log2(e), since Qs = q * scale * log2(e)
    if (4 * tx < HS) {
#pragma unroll
        for (int a = 0; a < 4; a++) {
            int c = k0 + ty + 16 * a;
            if (c >= T) break;
            float* dst = dqkv + ((size_t)b * T + c) * rs + (size_t)h * HS + 4 * tx;
            const float inv = 1.0f / LOG2E;
            *reinterpret_cast<float4*>(dst + C) = make_float4(dk[a][0] * inv, dk[a][1] * inv, dk[a][2] * inv, dk[a][3] * inv);
            *reinterpret_cast<float4*>(dst + 2 * C) = make_float4(dv[a][0], dv[a][1], dv[a][2], dv[a][3]);
        }
    }
}
