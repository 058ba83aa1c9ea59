/*
title = "Flash attention on TF32 tensor cores: mma.m16n8k8 for Q K^T and P V, fp32 in and out"
builds_on = 6
variant = "tf32"  # promoted as the family's @tf32 entry: train --attention flash at fp32
changed = """
Version 6's flash loop (64-key tiles up to the diagonal, online softmax, no T x T matrix), with both
matmuls moved from FFMA micro-tiles to the tensor cores: each warp owns 16 query rows and computes
its 16 x 64 score tile and its 16 x HS output with warp-wide mma.sync.m16n8k8 TF32 instructions.
Q's fragments are loaded once into registers; K and V tiles are double-buffered in shared memory
with cp.async; the scores never leave registers: the accumulators of Q K^T become, after the
softmax, the A operand of P V.
"""
why = """
An H100 does ~50 TFLOP/s of fp32 FMAs but several times that in TF32 on its tensor cores: one mma
instruction is 16 x 8 x 8 = 1024 multiply-adds for the whole warp, where an FFMA is 32. Version 6
spends ~2 shared loads per 8 FMAs feeding the FP32 pipes; here a lane issues 1 shared load (8 B)
per mma of K and 2 (4 B) per mma of V. Its cost is precision: TF32 keeps 10 of fp32's 23 mantissa
bits (see the tolerance below).
The fragment lesson: mma's A fragment wants columns (t, t + 4) in a lane and its C fragment gives
(2t, 2t + 1), so P cannot be fed back as is. But a matmul's inner index may be renumbered at will,
as long as A's columns and B's rows are renumbered the same way: we let A-column t of k-step kk
stand for key 8 kk + 2t and column t + 4 for key 8 kk + 2t + 1. Then P's A fragment is exactly
the lane's own score accumulators, and V's B fragment is rows 8 kk + 2t and 8 kk + 2t + 1. The
same renumbering of channels in Q K^T makes each lane's two K values adjacent in memory: one
8-byte shared load per mma.
Rounding to tf32 (cvt.rna: ~3 instructions, no single SASS op) is done once per element: each
thread rounds, in shared memory, the K and V elements its own cp.async copies brought, right
after waiting for them and before the barrier that shows the tile to the other warps. Rounding
the fragments instead would redo it in all 4 warps (288 conversions a lane a tile instead of 96).
Banks: K rows of HSP + 8 floats (HSP: the head padded to 64 or 128; = 8 mod 32 words): the
8-byte loads of a half-warp (rows g, channels 2t) hit 32 different banks; V rows of HSP + 4
(= 4 mod 32): the 4-byte loads of rows 2t, 2t + 1 at channel 8 n + g hit 32 different banks.
"""
preconditions = ["HS <= 128"]
# TF32 rounds q, k (for S) and p, v (for P V) to 11 significant bits: unit roundoff u = 2^-11
# = 4.9e-4 (cvt.rna, to nearest); products are exact and sums fp32 (~1e-7, negligible).
# Scores s = q.k / sqrt(HS): error sum_i q_i k_i (dq_i + dk_i) / sqrt(HS), HS independent terms:
#   standard deviation u sqrt(2/3) = 4e-4 for unit-normal q, k at any HS; worst case
#   2u sum |q_i k_i| / sqrt(HS) = 1.3 u sqrt(HS) = 5e-3 at HS 64. Small heads have heavier tails
#   (a few large q_i k_i dominate).
# lse moves by the p-weighted mean of the score errors: a few times 4e-4 at most in practice.
# out = sum p_j v_j / l: p and v each round by u (|d out| <= 2u sum p_j |v_j| / l <= 2u max|v|,
#   3.4e-3 for |v| <= 3.5), plus the score errors moving the weights (<= max|ds| x spread of v).
#   Independent roundings average out over a row's keys; rows with one or two keys see the full
#   relative u of v: that is what rtol covers.
# An emulation on the CPU (the same roundings, tile-wise running max, float64 otherwise) against
# the reference, at the default sizes and every test size, 3 seeds: max |error| 1.4e-3 on out
# (default sizes), 1.6e-3 on lse (HS = 4); the largest |error| / (atol + rtol |ref|) is 0.43
# with the tolerance below, which sits near the worst-case bound on out.
tolerance = { atol = 3e-3, rtol = 3e-3 }

# HS a multiple of 4: 16-byte cp.async rows and 8-byte output stores; other head sizes load and
# store element by element. HSP (the head zero-padded in shared memory) = 64 or 128.
[[launch]]
kernel = "attention_forward7_hs64"
when = "HS % 4 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 64 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs128"
when = "HS % 4 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 128 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs64_any"
when = "HS % 4 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 64 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs128_any"
when = "HS % 4 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 128 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_mma.cuh"  // load_tile, for_each_copied, tile_ready, mask_causal, online_softmax, store_rows
#include "mma.cuh"            // mma_tf32_1688, to_tf32, cp.async; fragment layouts

#define BR 64        // query rows per block: 4 warps x 16
#define BC 64        // keys per tile
#define THREADS 128

// Fragment map (g = lane / 4, t = lane % 4; m16n8k8 TF32 layouts in mma.cuh: A[g][t], A[g+8][t],
// A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]; C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)).
// k renumbered within each 8-wide step kk: A column / B row t <-> index 8 kk + 2t,
// t + 4 <-> 8 kk + 2t + 1.
// S = Q K^T, k = channels: a = { Q[g][c], Q[g+8][c], Q[g][c+1], Q[g+8][c+1] } with c = 8 kk + 2t;
//   for keys 8j..8j+7 (n-tile j): b = { K[8j+g][c], K[8j+g][c+1] }: one float2.
// P V, k = keys of step kk: a = { P[g][k], P[g+8][k], P[g][k+1], P[g+8][k+1] } with k = 8 kk + 2t,
//   which are S's accumulators s[kk][0], s[kk][2], s[kk][1], s[kk][3];
//   for channels 8n..8n+7: b = { V[k][8n+g], V[k+1][8n+g] }.
template <int HSP, bool ASYNC>
__device__ __forceinline__ void attention_forward7_body(float* out, float* lse, const float* qkv, int T, int NH,
                                                        int HS, float sl) {
    constexpr int KS = HSP + 8;  // K row stride in floats: 8 mod 32 (conflict-free 8-byte loads)
    constexpr int VS = HSP + 4;  // V row stride in floats: 4 mod 32
    constexpr int KT = HSP / 8;  // k-steps of Q K^T
    constexpr int NT = BC / 8;   // 8-key n-tiles of S (and k-steps of P V)
    constexpr int DT = HSP / 8;  // 8-channel n-tiles of O
    extern __shared__ float4 smem4[];
    float* Ks = reinterpret_cast<float*>(smem4);  // two buffers of BC rows
    float* Vs = Ks + 2 * BC * KS;                 // two buffers of BC rows

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int row0 = q0 + 16 * warp;                    // this warp's first query row
    const int C = NH * HS;
    const int rs = 3 * C;                               // qkv row stride
    const float* base = head_rows(qkv, 0, T, NH, HS);     // q of row 0 of this block's head
    const int tiles = q0 / BC + 1;                      // key tiles 0 .. the diagonal one (BC == BR)

    load_tile<float, BC, HSP, KS, THREADS, ASYNC>(Ks, base + C, rs, T, HS);
    load_tile<float, BC, HSP, VS, THREADS, ASYNC>(Vs, base + 2 * C, rs, T, HS);
    cp_async_commit();

    // Q's fragments straight from global memory (once per block, while K/V tile 0 is in flight);
    // zeros past T and past HS.
    uint32_t qf[KT][4];
    {
        const float* q_lo = base + (size_t)min(row0 + g, T - 1) * rs;      // row g (clamped: valid address)
        const float* q_hi = base + (size_t)min(row0 + g + 8, T - 1) * rs;  // row g + 8
        const bool lo_ok = row0 + g < T, hi_ok = row0 + g + 8 < T;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
            const int c = 8 * kk + 2 * t;
            qf[kk][0] = to_tf32(lo_ok && c < HS ? q_lo[c] : 0.0f);
            qf[kk][1] = to_tf32(hi_ok && c < HS ? q_hi[c] : 0.0f);
            qf[kk][2] = to_tf32(lo_ok && c + 1 < HS ? q_lo[c + 1] : 0.0f);
            qf[kk][3] = to_tf32(hi_ok && c + 1 < HS ? q_hi[c + 1] : 0.0f);
        }
    }

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int j = 0; j < tiles; j++) {
        const int k0 = j * BC;
        tile_ready(j, tiles, [&] {  // prefetch tile j + 1 into the other buffer
            const float* next = head_rows(qkv, k0 + BC, T, NH, HS);
            const int nb = (j + 1) % 2 * BC;
            load_tile<float, BC, HSP, KS, THREADS, ASYNC>(Ks + nb * KS, next + C, rs, T - k0 - BC, HS);
            load_tile<float, BC, HSP, VS, THREADS, ASYNC>(Vs + nb * VS, next + 2 * C, rs, T - k0 - BC, HS);
        }, [&] {  // round tile j to tf32 once, in place: each thread the elements it copied
            const auto round = [](float& x) { x = __uint_as_float(to_tf32(x)); };
            for_each_copied<float, BC, HSP, KS, THREADS, ASYNC>(Ks + j % 2 * BC * KS, round);
            for_each_copied<float, BC, HSP, VS, THREADS, ASYNC>(Vs + j % 2 * BC * VS, round);
        });
        // This lane's rows: K row g (+ 8j per n-tile), channel 2t (+ 8kk); V row 2t (+ 8kk), channel g (+ 8n).
        const float* Kc = Ks + j % 2 * BC * KS + g * KS + 2 * t;
        const float* Vc = Vs + j % 2 * BC * VS + 2 * t * VS + g;

        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const float2 kb = *reinterpret_cast<const float2*>(Kc + 8 * n * KS + 8 * kk);  // tf32 already
                mma_tf32_1688(s[n], qf[kk], __float_as_uint(kb.x), __float_as_uint(kb.y));
            }
        if (k0 == q0) mask_causal(s, k0, row0);  // the diagonal tile: keys past the row
        online_softmax(s, o, m, l, sl);

#pragma unroll
        for (int kk = 0; kk < NT; kk++) {
            const uint32_t pa[4] = {to_tf32(s[kk][0]), to_tf32(s[kk][2]), to_tf32(s[kk][1]), to_tf32(s[kk][3])};
#pragma unroll
            for (int n = 0; n < DT; n++)
                mma_tf32_1688(o[n], pa, __float_as_uint(Vc[8 * kk * VS + 8 * n]), __float_as_uint(Vc[(8 * kk + 1) * VS + 8 * n]));
        }
        __syncthreads();  // everyone is done with buffer j % 2 before iteration j + 1 refills it
    }

    store_rows<ASYNC>(out, lse, o, m, l, sl, row0, T, NH, HS);
}

// Blocks per SM: shared memory allows 3 (70 KB each) for HSP = 64 and 1 (134 KB) for HSP = 128;
// the register budget is set to match.
#define ENTRY(name, HSP, ASYNC, MIN_BLOCKS)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)                              \
    name(float* out, float* lse, const float* qkv, int T, int NH, int HS, float sl) {               \
        attention_forward7_body<HSP, ASYNC>(out, lse, qkv, T, NH, HS, sl);                          \
    }
ENTRY(attention_forward7_hs64, 64, true, 3)
ENTRY(attention_forward7_hs128, 128, true, 1)
ENTRY(attention_forward7_hs64_any, 64, false, 3)
ENTRY(attention_forward7_hs128_any, 128, false, 1)
