/*
title = "Tiled fp32 backward: a block per 64-key tile, no T x T buffer, dq by atomics"
builds_on = 1
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "One kernel after a memset of dqkv: each block stages 64 keys and values of one head and walks the 64-row query tiles from the diagonal down, recomputing S = Q K^T and dP = dout V^T from shared memory with 4 x 4 register micro-tiles, accumulating dK and dV in registers (stored once) and adding each tile's dQ with atomics."
why = """
The scratch matrices are gone: per (key tile, query tile) pair, five 64 x 64 x 64 products run
out of shared memory and registers (the attention-backward version 5 scheme, with the softmax
Jacobian replaced by the ReLU mask), and only tiles on or below the diagonal are visited. The
ReLU keeps it simpler than softmax: no lse, no D, dS = [S > 0] dP. Raw q.k is tested for its
sign before any scaling, so the mask agrees exactly with the reference on the family's
integer inputs; scale / T is applied once, to P, and to dQ and dK on their way out. dQ rows
collect contributions from every key tile, so they are added atomically into dqkv, which the
memset zeroes first (dK and dV are stored, overwriting the zeros).
"""
preconditions = ["HS <= 64", "HS % 4 == 0"]

[[launch]]
memset = "dqkv"

[[launch]]
kernel = "relu_attention_backward2"
grid = ["B * NH", "cdiv(T, 64)"]
block = 256
shared = "4 * 6 * 64 * 68"
args = ["dqkv", "dout", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]
*/

#define TILE 64
#define DP 64
#define STRIDE 68
#define THREADS 256

__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
    return fmaf(a.x, b.x, fmaf(a.y, b.y, fmaf(a.z, b.z, fmaf(a.w, b.w, acc))));
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
relu_attention_backward2(float* dqkv, const float* dout, const float* qkv, int B, int T, int NH, int HS,
                         float scale_T) {
    extern __shared__ float4 smem4[];
    float* Ks = reinterpret_cast<float*>(smem4);  // [c][d]
    float* Vs = Ks + TILE * STRIDE;               // [c][d]
    float* Qs = Vs + TILE * STRIDE;               // [r][d], unscaled
    float* Gs = Qs + TILE * STRIDE;               // [r][d]: dout rows
    float* PT = Gs + TILE * STRIDE;               // [c][r]: relu(S) (unscaled) transposed
    float* ST = PT + TILE * STRIDE;               // [c][r]: [S > 0] dP transposed
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * TILE;  // early keys see the most queries: launched first
    const int C = NH * HS, hs4 = HS / 4;
    const size_t rs = 3 * (size_t)C;
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

    float dk[4][4], dv[4][4];  // rows k0 + ty + 16 a, channels 4 tx + e
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[a][e] = dv[a][e] = 0.0f;

    for (int q0 = k0; q0 < T; q0 += TILE) {
        __syncthreads();
        for (int i = tid; i < TILE * (DP / 4); i += THREADS) {
            int r = i / (DP / 4), c4 = i % (DP / 4);
            float4 qv = make_float4(0.f, 0.f, 0.f, 0.f), gv = qv;
            if (q0 + r < T && c4 < hs4) {
                qv = *reinterpret_cast<const float4*>(base + (size_t)(q0 + r) * rs + 4 * c4);
                gv = *reinterpret_cast<const float4*>(gbase + (size_t)(q0 + r) * C + 4 * c4);
            }
            *reinterpret_cast<float4*>(Qs + r * STRIDE + 4 * c4) = qv;
            *reinterpret_cast<float4*>(Gs + r * STRIDE + 4 * c4) = gv;
        }
        __syncthreads();

        float s[4][4], dp[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = dp[i][j] = 0.0f;
        // Two passes over d keep one operand tile's float4s live at a time (register pressure).
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
                bool on = r < T && c <= r && s[i][j] > 0.0f;  // causal, valid row, ReLU active
                PT[cl * STRIDE + rl] = on ? s[i][j] : 0.0f;
                ST[cl * STRIDE + rl] = on ? dp[i][j] : 0.0f;
            }
        }
        __syncthreads();

        // dV += relu(S)^T dout and dK += ([S > 0] dP)^T Q, both still missing the factor scale / T
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

        // dQ rows 4 ty + a, channels 4 tx + e
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
                for (int e = 0; e < 4; e++) atomicAdd(dst + e, dq[a][e] * scale_T);
            }
        }
    }

    if (4 * tx < HS) {
#pragma unroll
        for (int a = 0; a < 4; a++) {
            int c = k0 + ty + 16 * a;
            if (c >= T) break;
            float* dst = dqkv + ((size_t)b * T + c) * rs + (size_t)h * HS + 4 * tx;
            *reinterpret_cast<float4*>(dst + C) =
                make_float4(dk[a][0] * scale_T, dk[a][1] * scale_T, dk[a][2] * scale_T, dk[a][3] * scale_T);
            *reinterpret_cast<float4*>(dst + 2 * C) =
                make_float4(dv[a][0] * scale_T, dv[a][1] * scale_T, dv[a][2] * scale_T, dv[a][3] * scale_T);
        }
    }
}
