/*
title = "Flash attention on bf16 tensor cores: mma.m16n8k16, ldmatrix, cp.async double buffering"
builds_on = 7
precision = "bf16"
changed = """
Version 7's structure in bf16 (q, k, v and out bf16; scores, softmax and output accumulated in fp32;
lse fp32), with the moves that feed the tensor cores fast: m16n8k16 bf16 MMAs (twice the work of
a TF32 m16n8k8 per instruction), operands fetched from shared memory with ldmatrix (one
instruction fills a whole 16 x 16 A fragment or the B fragments of two 8-wide n-tiles; .trans
turns V's rows into the B layout of P V for free), Q held in registers for the whole loop, P
passed from the score accumulators to the A operand of P V without touching shared memory, and
K/V tiles copied with cp.async into a second buffer while the current one is computed.
"""
why = """
Attention's two matmuls are 95% of its FLOPs; bf16 mma.sync does them at twice the rate of TF32
and roughly ten times that of version 6's FP32 FMAs (an H100 SM, in FLOPs a clock: 256 on the
FP32 pipes, 4096 bf16 through Hopper's wgmma, which this course leaves for later, and about 60%
of that through mma.sync). What is left must not stall them:
* Loads overlap compute: tile j + 1 is in flight (cp.async, no registers, no L1) while tile j is
  multiplied; two barriers per tile (tile j visible; tile j's buffer free again).
* ldmatrix moves 512 bytes per warp instruction into exactly the fragment layout the mma wants;
  rows are padded to HSP + 8 elements (144 bytes for HSP = 64, 16 mod 128), so the 8 rows one
  8 x 8 matrix reads start in 8 different 16-byte bank groups: no conflicts.
* The S = Q K^T accumulator layout of two adjacent 8-key n-tiles is, element for element, the A
  fragment layout of P for the next mma: P is rounded to bf16 pairs in registers (16 cvt per
  lane per tile) and goes straight into P V.
* The softmax works in base 2 on scaled scores (one FFMA + one ex2 per score); the row max and
  sum are two xor shuffles over the 4 lanes that share a row; the output is rescaled in
  registers. Only the diagonal tile is masked, and the loop stops there.
* Long query tiles (late in the sequence, most keys) are scheduled first.
Sizes per block: 64 query rows (4 warps x 16 rows), 64-key tiles, head zero-padded to HSP = 64 or
128. Shared memory (HSP + 8) x 64 x 2 B per tile x (Q + 2 K + 2 V) = 45 KB (HSP 64) or 85 KB.
"""
preconditions = ["HS <= 128"]

# head sizes that are a multiple of 8: 16-byte cp.async rows; others: element-wise loads, same
# kernel otherwise. HSP = 64 for HS <= 64 (smaller heads are zero-padded), 128 above.
[[launch]]
kernel = "attention_forward8_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]
*/

#include "attention_mma.cuh"  // load_tile, tile_ready, mask_causal, online_softmax, store_rows
#include "bf16.cuh"
#include "mma.cuh"            // mma_bf16_16816, ldmatrix, cp.async: the fragment layouts

#define BR 64        // query rows per block: 4 warps x 16
#define BC 64        // keys per tile
#define THREADS 128

// The warp's tile products, on tiles in shared memory with row stride S elements:
// q_fragments_bf16: its Q fragments for KT 16-channel steps (q_rows: the warp's first Q row);
// qk_bf16: the scores of NT / 2 pairs of 8-key n-tiles (s is set, not accumulated);
// pv_bf16: o += p V for DT 8-channel n-tiles (p: the probabilities, in the layout of s, rounded
// to bf16 here). k_rows / v_rows: this lane's ldmatrix row in the K / V tile (shared-space bytes).
//
// Fragment maps (g = lane / 4, t = lane % 4; the layouts are in mma.cuh):
// S = Q K^T, per warp 16 rows x 8 NT keys, as KT k-steps of 16 channels x NT / 2 pairs of 8-key
// n-tiles.
//   A = Q[16 rows][16 channels]: ldmatrix_x4, matrices = the quarters (rows 0-7 | 8-15) x
//     (channels 0-7 | 8-15) in the order top-left, bottom-left, top-right, bottom-right. Lane l
//     gives the address of row (l % 16), channel 8 (l / 16): lanes 0-7 rows 0-7 / ch 0, lanes
//     8-15 rows 8-15 / ch 0, lanes 16-23 rows 0-7 / ch 8, lanes 24-31 rows 8-15 / ch 8.
//   B = K^T for keys 16p..16p+15 (n-tiles 2p and 2p+1): B[k][n] = K[key n][channel k], so the
//     B layout's pair (k = 2t, 2t+1; n = g) is K[g][2t..2t+1], adjacent: plain ldmatrix on K's
//     rows. Lane l gives key 16p + (l % 8) + 8 (l / 16), channel 16kk + 8 ((l / 8) % 2), so the
//     matrices are (keys 0-7, ch 0-7) = b0 of n-tile 2p, (keys 0-7, ch 8-15) = b1 of 2p,
//     (keys 8-15, ch 0-7) = b0 of 2p+1, (keys 8-15, ch 8-15) = b1 of 2p+1.
// O += P V: per warp 16 rows x 8 DT channels, as NT / 2 k-steps of 16 keys x DT / 2 pairs of
// 8-channel n-tiles.
//   A = P[16 rows][keys 16kk..16kk+15]: the A layout wants (row g, keys 2t, 2t+1) in a[0],
//     (g+8, 2t..) in a[1], (g, 2t+8..) in a[2], (g+8, 2t+8..) in a[3]. S's n-tile 2kk holds
//     (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of keys 16kk.., n-tile 2kk+1 the same for keys
//     16kk+8..: a = { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] }, packed to bf16.
//     The score accumulators become the next mma's operand without leaving registers.
//   B = V[keys][channels 16p..16p+15]: B[k][n] = V[key k][channel n], pair (k = 2t, 2t+1; n = g)
//     is two different rows of V: ldmatrix .trans on V's rows hands lane (g, t) rows 2t, 2t+1
//     of column g. Lane l gives key 16kk + (l % 16), channel 16p + 8 (l / 16) (Q's pattern), so
//     the matrices are (keys 0-7, ch 0-7) = b0 of n-tile 2p, (keys 8-15, ch 0-7) = b1 of 2p,
//     (keys 0-7, ch 8-15) = b0 of 2p+1, (keys 8-15, ch 8-15) = b1 of 2p+1.
// Both B orders are chosen so that each n-tile's (b0, b1) are consecutive destination registers
// of the ldmatrix: the mma reads B as an aligned register pair, and any other pairing costs a
// register move per operand (K's lane pattern for V would save one address register, and cost
// ~30 moves a tile).

// This lane's ldmatrix row in a K tile and in a V tile (the patterns above), as shared-space
// addresses; a 16-row / 16-element step adds a constant.
template <int S>
__device__ __forceinline__ uint32_t k_rows_bf16(const __nv_bfloat16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 8 + 8 * (lane / 16)) * S + 8 * (lane / 8 % 2));
}

template <int S>
__device__ __forceinline__ uint32_t v_rows_bf16(const __nv_bfloat16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 16) * S + 8 * (lane / 16));
}

template <int KT, int S>
__device__ __forceinline__ void q_fragments_bf16(uint32_t (&qf)[KT][4], const __nv_bfloat16* q_rows) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) ldmatrix_x4(qf[kk], q_rows + (lane % 16) * S + 16 * kk + 8 * (lane / 16));
}

template <int KT, int NT, int S>
__device__ __forceinline__ void qk_bf16(float (&s)[NT][4], const uint32_t (&qf)[KT][4], uint32_t k_rows) {
#pragma unroll
    for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;  // ptxas feeds RZ instead
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int p = 0; p < NT / 2; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k_rows + (16 * p * S + 16 * kk) * 2);  // 2 bytes an element
            mma_bf16_16816(s[2 * p], qf[kk], kb[0], kb[1]);
            mma_bf16_16816(s[2 * p + 1], qf[kk], kb[2], kb[3]);
        }
}

template <int NT, int DT, int S>
__device__ __forceinline__ void pv_bf16(float (&o)[DT][4], const float (&p)[NT][4], uint32_t v_rows) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        const uint32_t pa[4] = {pack_bf16x2(p[2 * kk][0], p[2 * kk][1]), pack_bf16x2(p[2 * kk][2], p[2 * kk][3]),
                                pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v_rows + (16 * kk * S + 16 * n) * 2);
            mma_bf16_16816(o[2 * n], pa, vb[0], vb[1]);
            mma_bf16_16816(o[2 * n + 1], pa, vb[2], vb[3]);
        }
    }
}

template <int HSP, bool ASYNC>
__device__ __forceinline__ void attention_forward8_body(bf16* out, float* lse, const bf16* qkv, int T, int NH,
                                                        int HS, float sl) {
    constexpr int S = HSP + 8;   // shared row stride in elements (see "why": conflict-free ldmatrix)
    constexpr int KT = HSP / 16; // k-steps of Q K^T
    constexpr int NT = BC / 8;   // 8-key n-tiles of S
    constexpr int DT = HSP / 8;  // 8-channel n-tiles of O
    extern __shared__ float4 smem4[];
    bf16* Qs = reinterpret_cast<bf16*>(smem4);
    bf16* Ks = Qs + BR * S;      // two buffers of BC rows
    bf16* Vs = Ks + 2 * BC * S;  // two buffers of BC rows

    const int warp = threadIdx.x / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int row0 = q0 + 16 * warp;                    // this warp's first query row
    const int C = NH * HS;
    const int rs = 3 * C;                               // qkv row stride
    const bf16* base = head_rows(qkv, 0, T, NH, HS);     // q of row 0 of this block's head
    const int tiles = q0 / BC + 1;                      // key tiles 0 .. the diagonal one (BC == BR)

    // Q (one group), then K/V tile 0 (a second group): wait for Q only, take its fragments.
    load_tile<bf16, BR, HSP, S, THREADS, ASYNC>(Qs, base + (size_t)q0 * rs, rs, T - q0, HS);
    cp_async_commit();
    load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Ks, base + C, rs, T, HS);
    load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Vs, base + 2 * C, rs, T, HS);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[KT][4];
    q_fragments_bf16<KT, S>(qf, Qs + 16 * warp * S);
    const uint32_t k_lane = k_rows_bf16<S>(Ks), v_lane = v_rows_bf16<S>(Vs);  // ldmatrix rows, buffer 0

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int j = 0; j < tiles; j++) {
        const int k0 = j * BC;
        tile_ready(j, tiles, [&] {  // prefetch tile j + 1 into the other buffer
            const bf16* next = head_rows(qkv, k0 + BC, T, NH, HS);
            const int nb = (j + 1) % 2 * BC * S;
            load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Ks + nb, next + C, rs, T - k0 - BC, HS);
            load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Vs + nb, next + 2 * C, rs, T - k0 - BC, HS);
        });
        // This lane's ldmatrix row addresses in the current buffers (shared-space bytes).
        const uint32_t buf = j % 2 * BC * S * sizeof(bf16), kc = k_lane + buf, vc = v_lane + buf;

        float s[NT][4];
        qk_bf16<KT, NT, S>(s, qf, kc);
        if (k0 == q0) mask_causal(s, k0, row0);  // the diagonal tile: keys past the row
        online_softmax(s, o, m, l, sl);

        pv_bf16<NT, DT, S>(o, s, vc);
        __syncthreads();  // everyone is done with buffer j % 2 before iteration j + 1 refills it
    }

    store_rows<ASYNC>(out, lse, o, m, l, sl, row0, T, NH, HS);
}

// Blocks per SM the register budget must allow: 4 (<= 128 registers a thread: 16 warps an SM,
// with 4 x 45 KB of shared memory) for HSP = 64, whose Q, S and O fragments alone take 80
// registers; 2 for HSP = 128 (Q and O double). 128 is tight: ptxas (CUDA 13.0) fits the loop
// without spills only since the per-tile addresses are recomputed (fresh_block_x); if another
// compiler spills, 3 (<= 168 registers, 12 warps) is the fallback.
#define ENTRY(name, HSP, ASYNC, MIN_BLOCKS)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)                              \
    name(bf16* out, float* lse, const bf16* qkv, int T, int NH, int HS, float sl) {                 \
        attention_forward8_body<HSP, ASYNC>(out, lse, qkv, T, NH, HS, sl);                          \
    }
ENTRY(attention_forward8_hs64, 64, true, 4)
ENTRY(attention_forward8_hs128, 128, true, 2)
ENTRY(attention_forward8_hs64_any, 64, false, 3)
ENTRY(attention_forward8_hs128_any, 128, false, 2)
