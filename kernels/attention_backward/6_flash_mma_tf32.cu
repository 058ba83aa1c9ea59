/*
title = "TF32 tensor cores (mma.sync m16n8k8): version 5's flash backward with every product on the tensor cores"
builds_on = 5
variant = "tf32"  # promoted as the family's @tf32 entry: train --attention flash at fp32
deterministic = false  # dQ is summed over key tiles with float atomicAdd, as in version 5
changed = """
Version 5's structure (a block per 64 keys of a head, query tiles from the diagonal down, D and
the zeroed dq from a first kernel, dQ by atomics) with the five 64 x 64 x 64 products per pair as
TF32 mma.sync.m16n8k8 instructions instead of 4 x 4 FMA micro-tiles. Each warp owns 16 keys;
tiles arrive by cp.async and are rounded to TF32 in shared memory once, by the thread that copied
them; P and dS are rounded when they become the next product's operand.
"""
why = """
The H100's TF32 tensor cores have ~7x its fp32 FMA rate (dense; mma.sync reaches a good part of
it), for inputs rounded to 10 mantissa bits with fp32 accumulation: the trainer's --tf32 mode
already accepts that for its matmuls.
The warp-level layouts are those of the bf16 versions (7, 8), with one twist: in m16n8k8.tf32 a
lane holds A's columns t and t + 4 but C's columns 2t and 2t + 1, so an accumulator cannot be
reused as an A operand as it is. It can be once the k index is renumbered: the sum over k does
not care about order, so k-slot t of step j stands for query 8 j + 2 t and slot t + 4 for query
8 j + 2 t + 1, and the B operand is read with the same renumbering (rows 2t and 2t + 1 of the
tile, which also makes those scalar shared loads conflict-free with rows of 68 floats). A and
untransposed B fragments come from ldmatrix, which moves 16-bit pairs and so moves fp32 words
intact; transposed operands (dout and Q for dV and dK, K for dQ) are scalar loads.
Memory: K, V, Q, dout and dS^T tiles of 64 x 68 floats (86 KB): 2 blocks per SM. Q and dout are
single-buffered: the next tile's copy is issued after the dV/dK products and lands during dQ.
"""
preconditions = ["HS % 4 == 0", "HS <= 64"]
# TF32 keeps 10 of fp32's 23 mantissa bits (round to nearest: relative error <= 2^-11 = 4.9e-4 per
# input). Every product term has two rounded operands (~2^-10); the terms round independently, so a
# dot of HS = 64 terms of size ~1 is off by ~2^-10 sqrt(64 / 3) ~ 5e-3 before the 1/sqrt(HS) scale:
# ~6e-4 on S, hence ~6e-4 relative on P = exp(S - lse), and ~5e-3 on dP, times P on dS = P (dP - D)
# (D is exact fp32, so the rounding does not cancel). dV, dK, dQ are sums over T of such terms
# weighted by P (a row sums to 1) or |dS|, plus the rounding of P and dS themselves: ~1e-3 of
# |dqkv| (up to ~6), and absolute ~1e-3 where the sum cancels (e.g. dq of the first token is 0).
# A float64 model of exactly these roundings (tests/test_attention_backward.py), which the
# emulated kernel reproduces to the last digit, needs atol 2.2e-3 at rtol 1e-2 at the default
# sizes and at every test size (max |error| 3.9e-3 on |dqkv| <= 5.6): 5e-3 with 1e-2 is 2.3x that.
tolerance = { atol = 5e-3, rtol = 1e-2 }

[scratch]
D = "B * NH * T"

[[launch]]
kernel = "attention_backward6_prep"
grid = "cdiv(B * T * NH, 16)"   # 16 lanes (one float4 each) per (b, t, h) row, 16 rows per block
block = 256
args = ["dqkv", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward6"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * (5 * 64 * 68 + 2 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[emulate]]
runs = ["seed=0 PRIORITY"]
*/

#include "mma.cuh"  // mma_tf32_1688, ldmatrix_x4, cp_async_*, to_tf32
#include "reduce.cuh"        // warp_sum<16>

#define TILE 64     // keys per block, queries per step, channels (HS zero-padded to 64)
#define PITCH 68    // floats per shared row (272 B: ldmatrix rows and the scalar loads below are conflict-free)
#define NT 8        // 8-wide n-tiles (or k-steps) per 64
#define THREADS 128
#define LOG2E 1.4426950408889634f

// D[b, h, t] = dout . out over the head's HS channels, and dq = 0 in dqkv (it is summed by atomics).
extern "C" __global__ void attention_backward6_prep(float* dqkv, float* D, const float* dout, const float* out,
                                                    int B, int T, int NH, int HS) {
    const int lane16 = threadIdx.x % 16;
    const long long row = (long long)blockIdx.x * (blockDim.x / 16) + threadIdx.x / 16;  // (b, t, h)
    const bool in = row < (long long)B * T * NH;
    const int h = (int)(row % NH);
    const long long bt = row / NH;
    const size_t C = (size_t)NH * HS, at = bt * C + (size_t)h * HS + 4 * lane16;
    float s = 0.0f;
    if (in && 4 * lane16 < HS) {
        float4 g = *reinterpret_cast<const float4*>(dout + at), o = *reinterpret_cast<const float4*>(out + at);
        s = g.x * o.x + g.y * o.y + g.z * o.z + g.w * o.w;
        *reinterpret_cast<float4*>(dqkv + bt * 3 * C + (size_t)h * HS + 4 * lane16) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    s = warp_sum<16>(s);
    if (in && lane16 == 0) D[((bt / T) * NH + h) * T + bt % T] = s;
}

// Rows row0 .. row0 + 63 of a (T x stride) matrix's HS-channel slice into a [64][PITCH] tile by
// cp.async (4 floats a copy; zeros past T and past HS). round_tile() then rounds the same pieces,
// by the same threads, to TF32 in place once they have landed.
__device__ __forceinline__ void load_tile(float* s, const float* base, size_t stride, int row0, int T, int HS,
                                          const float* any) {
#pragma unroll
    for (int k = 0; k < TILE * (TILE / 4) / THREADS; k++) {
        int i = threadIdx.x + k * THREADS, r = i / (TILE / 4), c = 4 * (i % (TILE / 4));
        bool valid = row0 + r < T && c < HS;
        cp_async_16(s + r * PITCH + c, valid ? base + (size_t)(row0 + r) * stride + c : any, valid);
    }
}

__device__ __forceinline__ void round_tile(float* s) {
#pragma unroll
    for (int k = 0; k < TILE * (TILE / 4) / THREADS; k++) {
        int i = threadIdx.x + k * THREADS, r = i / (TILE / 4), c = 4 * (i % (TILE / 4));
        float4* p = reinterpret_cast<float4*>(s + r * PITCH + c);
        float4 v = *p;
        *p = make_float4(__uint_as_float(to_tf32(v.x)), __uint_as_float(to_tf32(v.y)),
                         __uint_as_float(to_tf32(v.z)), __uint_as_float(to_tf32(v.w)));
    }
}

// acc (16 x 64) += A (16 rows of `a` x 64 channels) . S^T for a tile S of 64 rows (the product's
// columns). Per k-step kk (channels 8 kk .. 8 kk + 7): A's fragment by one ldmatrix.x4, lane L at
// row L % 8 + 8 ((L / 8) % 2), word 8 kk + 4 (L / 16): matrices (rows 0-7, words 0-3) = a[0] =
// A[g][t], (rows 8-15, 0-3) = a[1], (rows 0-7, 4-7) = a[2] = A[g][t + 4], (rows 8-15, 4-7) = a[3].
// (ldmatrix hands lane (g, t) the 16-bit elements 2t, 2t + 1 of row g: fp32 word t, intact.)
// B[k][n] = S[n][k]: n-tiles j, j + 1 by one ldmatrix.x4, lane L at row 8 j + L % 8 + 8 (L / 16),
// word 8 kk + 4 ((L / 8) % 2): b[0] = S[8j + g][8kk + t] and b[1] = S[8j + g][8kk + t + 4] of
// tile j, then of tile j + 1.
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const float* a_rows, const float* s) {
    const int lane = threadIdx.x % 32;
    const float* pa = a_rows + (lane % 8 + 8 * ((lane / 8) % 2)) * PITCH + 4 * (lane / 16);
    const float* pb = s + (lane % 8 + 8 * (lane / 16)) * PITCH + 4 * ((lane / 8) % 2);
#pragma unroll 2
    for (int kk = 0; kk < NT; kk++) {
        unsigned a[4];
        ldmatrix_x4(a, pa + 8 * kk);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, pb + 8 * j * PITCH + 8 * kk);
            mma_tf32_1688(acc[j], a, b[0], b[1]);
            mma_tf32_1688(acc[j + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 x 64) += X . S, X given as 16 x 64 accumulator fragments x[j][e] (row g + 8 (e / 2),
// column 8 j + 2 t + e % 2) and S a [64][PITCH] tile (rows = X's columns = the k index).
// k-step j renumbered: slot t = column 8 j + 2 t, slot t + 4 = column 8 j + 2 t + 1, so
// a = {x[j][0], x[j][2], x[j][1], x[j][3]} (rows g, g + 8 at slot t, then at slot t + 4) and
// b[0] = S[8 j + 2 t][8 n + g], b[1] = S[8 j + 2 t + 1][8 n + g] (banks 8 t + g and 8 t + 4 + g).
__device__ __forceinline__ void mma_xb(float (&acc)[NT][4], const float (&x)[NT][4], const float* s) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const unsigned a[4] = {to_tf32(x[j][0]), to_tf32(x[j][2]), to_tf32(x[j][1]), to_tf32(x[j][3])};
        const float* p = s + (8 * j + 2 * t) * PITCH + g;
#pragma unroll
        for (int n = 0; n < NT; n++)
            mma_tf32_1688(acc[n], a, __float_as_uint(p[8 * n]), __float_as_uint(p[8 * n + PITCH]));
    }
}

// f(p, n, i) for each channel pair of a 16 x 64 accumulator x[n][2 i], x[n][2 i + 1] (row row0 + g
// + 8 i, channels 8 n + 2 t and + 1) inside the output (row < T, channel < HS; HS even, so a pair
// is in or out together): p = base + row * stride + channel.
template <class F>
__device__ __forceinline__ void for_pairs(float* base, size_t stride, int row0, int T, int HS, F f) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int c = 8 * n + 2 * t;
        if (c >= HS) continue;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int row = row0 + g + 8 * i;
            if (row < T) f(base + (size_t)row * stride + c, n, i);
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 2)
attention_backward6(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                    int T, int NH, int HS, float scale) {
    extern __shared__ __align__(16) float smem_f32[];
    float* sK = smem_f32;           // [64][PITCH] this block's keys
    float* sV = sK + TILE * PITCH;  // values
    float* sQ = sV + TILE * PITCH;  // current queries
    float* sG = sQ + TILE * PITCH;  // current dout rows
    float* sS = sG + TILE * PITCH;  // dS^T of the current pair, [key][query]
    float* sL = sS + TILE * PITCH;  // lse of the current queries
    float* sD = sL + TILE;          // D of the current queries

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * TILE, kw = k0 + 16 * warp;  // low blockIdx.y first: the longest
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;
    const float* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const float* gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    float* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;  // this head's dq; dk at + C, dv at + 2 C
    const float sl2 = scale * LOG2E;

    auto stage = [&](int q0) {  // queries q0 .. q0 + 63: q, dout, lse, D
        load_tile(sQ, qbase, rs, q0, T, HS, qkv);
        load_tile(sG, gbase, C, q0, T, HS, dout);
        if (tid < TILE) {
            bool valid = q0 + tid < T;
            cp_async_4(sL + tid, valid ? lse + (size_t)bh * T + q0 + tid : lse, valid);
            cp_async_4(sD + tid, valid ? D + (size_t)bh * T + q0 + tid : D, valid);
        }
        cp_async_commit();
    };
    load_tile(sK, qbase + C, rs, k0, T, HS, qkv);
    load_tile(sV, qbase + 2 * C, rs, k0, T, HS, qkv);
    stage(k0);
    cp_async_wait<0>();
    round_tile(sK);
    round_tile(sV);

    float dk[NT][4] = {}, dv[NT][4] = {};
    for (int q0 = k0; q0 < T; q0 += TILE) {
        cp_async_wait<0>();
        round_tile(sQ);  // this thread's own pieces: visible to it after its wait
        round_tile(sG);
        __syncthreads();  // (A) the tile is in and rounded; dQ of the previous pair is done with sS

        float sc[NT][4] = {}, dp[NT][4] = {};  // S^T, dP^T: keys kw + g (+ 8) x queries q0 + 8 j + 2 t (+ 1)
        if (kw <= q0 + TILE - 1) {              // else all this warp's keys come after every query: P = 0
            mma_abt(sc, sK + 16 * warp * PITCH, sQ);  // S^T = K Q^T
            mma_abt(dp, sV + 16 * warp * PITCH, sG);  // dP^T = V dout^T
            const bool edge = kw + 15 > q0 || q0 + TILE > T;
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int col = 8 * j + 2 * t;
                const float2 l2 = *reinterpret_cast<const float2*>(sL + col);
                const float2 d2 = *reinterpret_cast<const float2*>(sD + col);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int query = q0 + col + (e & 1), key = kw + g + 8 * (e >> 1);
                    float p = exp2f(fmaf(sc[j][e], sl2, -((e & 1) ? l2.y : l2.x) * LOG2E));
                    if (edge && (key > query || query >= T)) p = 0.0f;
                    sc[j][e] = p;                                        // P^T
                    dp[j][e] = p * (dp[j][e] - ((e & 1) ? d2.y : d2.x));  // dS^T
                }
            }
            mma_xb(dv, sc, sG);  // dV += P^T dout
            mma_xb(dk, dp, sQ);  // dK += dS^T Q
        }
        // dS^T (rounded: it is the A operand of dQ) into sS, rows 16 warp + g (+ 8)
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int half = 0; half < 2; half++)
                *reinterpret_cast<float2*>(sS + (16 * warp + g + 8 * half) * PITCH + 8 * j + 2 * t) =
                    make_float2(__uint_as_float(to_tf32(dp[j][2 * half])), __uint_as_float(to_tf32(dp[j][2 * half + 1])));
        }
        __syncthreads();  // (B) sS complete; sQ, sG, sL, sD no longer read by this pair
        if (q0 + TILE < T) stage(q0 + TILE);  // lands while dQ runs

        // dQ rows q0 + 16 warp + g (+ 8), all 64 channels: sum over the 64 keys of dS[q][key] K[key][c].
        // k-step kk renumbered like mma_xb: slot t = key 8 kk + 2 t, slot t + 4 = key 8 kk + 2 t + 1:
        // a = dS[16 warp + g (+ 8)][those keys] = sS[key][query], b = K[those keys][8 n + g].
        float dq[NT][4] = {};
#pragma unroll
        for (int kk = 0; kk < NT; kk++) {
            const float* ps = sS + (8 * kk + 2 * t) * PITCH + 16 * warp + g;
            const unsigned a[4] = {__float_as_uint(ps[0]), __float_as_uint(ps[8]), __float_as_uint(ps[PITCH]),
                                   __float_as_uint(ps[PITCH + 8])};
            const float* pk = sK + (8 * kk + 2 * t) * PITCH + g;
#pragma unroll
            for (int n = 0; n < NT; n++)
                mma_tf32_1688(dq[n], a, __float_as_uint(pk[8 * n]), __float_as_uint(pk[8 * n + PITCH]));
        }
        for_pairs(out, rs, q0 + 16 * warp, T, HS, [&](float* p, int n, int i) {
            atomicAdd(p, dq[n][2 * i] * scale);
            atomicAdd(p + 1, dq[n][2 * i + 1] * scale);
        });
    }
    // dK = scale dS^T Q and dV, rows kw + g (+ 8): written once.
    for_pairs(out + C, rs, kw, T, HS, [&](float* p, int n, int i) {
        *reinterpret_cast<float2*>(p) = make_float2(dk[n][2 * i] * scale, dk[n][2 * i + 1] * scale);
        *reinterpret_cast<float2*>(p + C) = make_float2(dv[n][2 * i], dv[n][2 * i + 1]);
    });
}
