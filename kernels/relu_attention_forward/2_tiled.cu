/*
title = "Tiled fp32 kernel: 64 x 64 tiles in shared memory, 4 x 4 register micro-tiles, no T x T buffer"
builds_on = 1
changed = "One kernel: a block of 256 threads owns 64 query rows and streams 64-row key/value tiles up to the diagonal; each thread computes a 4 x 4 block of scores and accumulates a 4 x 4 block of the output in registers."
why = """
The scores never touch memory: per key tile, S = Q K^T and O += relu(S) V are two 64 x 64 x 64
products done from float4 shared-memory loads (each feeding 16 FMAs) with only tiles on or
below the diagonal visited. Without a softmax there is no running max or sum to carry between
tiles, so this is the attention-forward version 5 minus the online rescaling. Since
relu(c x) = c relu(x) for c > 0, the whole factor scale / T is folded into Q when it is staged.
Shared-memory layout as in attention_forward 5 (row stride 68 for conflict-free key reads,
P handed over within a half-warp with __syncwarp).
"""
preconditions = ["HS <= 64", "HS % 4 == 0"]

[[launch]]
kernel = "relu_attention_forward2"
grid = ["B * NH", "cdiv(T, 64)"]
block = 256
shared = "4 * (2 * 64 * 68 + 64 * 64 + 64 * 80)"
args = ["out", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]
*/

#define BR 64
#define BC 64
#define DP 64
#define QK_STRIDE 68
#define V_STRIDE 64
#define P_STRIDE 80
#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS)
relu_attention_forward2(float* out, const float* qkv, int B, int T, int NH, int HS, float qscale) {
    extern __shared__ float4 smem4[];
    float* Qs = reinterpret_cast<float*>(smem4);
    float* Ks = Qs + BR * QK_STRIDE;
    float* Vs = Ks + BC * QK_STRIDE;
    float* Ps = Vs + BC * V_STRIDE;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
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

    float o[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][e] = 0.0f;

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

        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll
        for (int d = 0; d < DP; d += 4) {
            float4 kf[4];
#pragma unroll
            for (int j = 0; j < 4; j++) kf[j] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * j) * QK_STRIDE + d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 qf = *reinterpret_cast<const float4*>(Qs + (ty + 16 * i) * QK_STRIDE + d);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    s[i][j] = fmaf(qf.x, kf[j].x, s[i][j]);
                    s[i][j] = fmaf(qf.y, kf[j].y, s[i][j]);
                    s[i][j] = fmaf(qf.z, kf[j].z, s[i][j]);
                    s[i][j] = fmaf(qf.w, kf[j].w, s[i][j]);
                }
            }
        }
        const bool diagonal = k0 + BC - 1 > q0;
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float p = fmaxf(s[i][j], 0.0f);
                if (diagonal && k0 + tx + 16 * j > q0 + ty + 16 * i) p = 0.0f;  // t2 > t (and t2 >= T)
                Ps[(ty + 16 * i) * P_STRIDE + tx + 16 * j] = p;
            }
        __syncwarp();  // P rows are read back only by the half-warp that wrote them

#pragma unroll
        for (int c = 0; c < BC; c += 4) {
            float4 vf[4];
#pragma unroll
            for (int u = 0; u < 4; u++) vf[u] = *reinterpret_cast<const float4*>(Vs + (c + u) * V_STRIDE + 4 * tx);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 pf = *reinterpret_cast<const float4*>(Ps + (ty + 16 * i) * P_STRIDE + c);
                o[i][0] = fmaf(pf.x, vf[0].x, fmaf(pf.y, vf[1].x, fmaf(pf.z, vf[2].x, fmaf(pf.w, vf[3].x, o[i][0]))));
                o[i][1] = fmaf(pf.x, vf[0].y, fmaf(pf.y, vf[1].y, fmaf(pf.z, vf[2].y, fmaf(pf.w, vf[3].y, o[i][1]))));
                o[i][2] = fmaf(pf.x, vf[0].z, fmaf(pf.y, vf[1].z, fmaf(pf.z, vf[2].z, fmaf(pf.w, vf[3].z, o[i][2]))));
                o[i][3] = fmaf(pf.x, vf[0].w, fmaf(pf.y, vf[1].w, fmaf(pf.z, vf[2].w, fmaf(pf.w, vf[3].w, o[i][3]))));
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = q0 + ty + 16 * i;
        if (r < T && 4 * tx < HS)
            *reinterpret_cast<float4*>(out + ((size_t)b * T + r) * C + (size_t)h * HS + 4 * tx) =
                make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
    }
}
