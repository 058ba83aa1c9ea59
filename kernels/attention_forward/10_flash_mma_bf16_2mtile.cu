/*
title = "bf16 flash attention, 32 query rows a warp: each K/V fragment feeds two mma, P V a tile behind"
builds_on = 8
precision = "bf16"
changed = """
Version 8's kernel (mma.m16n8k16, ldmatrix, cp.async, P kept in registers) reorganised around the
two things that bound it, shared-memory traffic and instructions issued per mma:
* A warp owns 32 query rows (two m16 tiles) instead of 16, so every K or V fragment it loads
  with ldmatrix feeds two mma; a block is 4 warps x 32 = 128 query rows (was 64), sharing each
  64-key K/V tile.
* P V runs a tile behind Q K^T: iteration j computes the scores of tile j and, independently,
  o += P_{j-1} V_{j-1}, so the scheduler can interleave those mma with the softmax's MUFU and
  FFMA work inside the warp; the V stream is staged one tile behind the K stream.
* One barrier per tile (was two): the copies for tile j + 2 are issued right after the barrier
  that ends tile j - 1, into the buffers that barrier freed; three K and three V buffers.
* The softmax's reference point moves lazily: o is rescaled (64 FMUL a lane) only when a row's
  maximum passes the reference by more than a factor 2^8: almost only on the first tile.
* The steady state is one straight block of code (compile-time step flags), and whole-tile copies
  take a short address path.
For HS > 64 (head padded to 128), a warp keeps 16 rows (Q and O twice the size) in 64-row blocks,
with the other changes.
"""
why = """
Version 8 is bound by instruction issue and shared-memory bandwidth, not by the tensor cores. Per
warp and 64-key tile (sm_90 SASS), version 8's 16 rows cost 64 mma, 32 ldmatrix.x4 (16 KB of
shared reads) and ~420 instructions: 6.6 issued a mma, against ~6 clocks of tensor time, and its
shared reads cap it near what mma.sync delivers. A warp owning 32 query rows (two m16 tiles) uses
each K/V fragment for two mma: 128 mma for the same 16 KB of ldmatrix and ~600 instructions, 4.7
issued a mma and half the shared-memory bytes a mma. P V runs a tile behind Q K^T (the lag), so the
exp2 of one tile overlaps the products of the previous, and O is rescaled only when a row's maximum
moved. K/V tiles from L2 now serve 128 query rows a block instead of 64.

The cost is registers: Q fragments, o, s, the lagging P, m and l take 255 (no spills), so 2 blocks
(8 warps) an SM, and 72 KB of shared memory a block. Fewer warps hide less latency: the lag and
the two independent m tiles of a warp keep the tensor pipe fed. Query tiles are dispatched longest
first; only each warp's diagonal tile is masked; rows past T are computed and not stored.
PV_LAG = 0 and RESCALE_SLACK = 0 below turn the two tricks off, to measure what they are worth.
Attention is compute bound, so the copy row is no bar here.

The counts, the scheduling model and the measurements: results/notes/attention_forward.md.
"""
preconditions = ["HS <= 128"]

# HS a multiple of 8: 16-byte cp.async rows; others: element-wise loads, the same kernel otherwise.
# HSP = 64 for HS <= 64 (smaller heads zero-padded): 32 rows a warp, 128-row blocks, 3 stages.
# HSP = 128: 16 rows a warp (Q and o would need 192 registers at 32), 64-row blocks, 2 stages
# (3 would take 119 KB, one block an SM).
[[launch]]
kernel = "attention_forward10_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[emulate]]
runs = ["seed=0 PRIORITY", "seed=1 EARLY SHUFFLE sched_seed=2", "seed=2 SHUFFLE order=5 sched_seed=3"]

[[emulate]]
sizes = [{ B = 1, T = 300, NH = 1, HS = 64 }, { B = 1, T = 256, NH = 2, HS = 32 },
  { B = 1, T = 200, NH = 1, HS = 128 }, { B = 2, T = 128, NH = 1, HS = 64 },
  { B = 1, T = 70, NH = 2, HS = 96 }, { B = 1, T = 140, NH = 1, HS = 24 }]
runs = ["seed=0 PRIORITY", "seed=1 EARLY SHUFFLE sched_seed=2"]
*/

#include "attention_fwd_mma.cuh"  // stage_rows, the fragment maps, softmax_tile, pv, store_rows
#include "bf16.cuh"
#include "mma.cuh"

#define BC 64  // keys per tile
template <bool B>
struct Flag {  // a compile-time yes / no passed by value: step(j, Flag<true>{}, ...)
    static constexpr bool value = B;
};
// Two switches, for measuring what each idea is worth (the tests run both settings):
// RESCALE_SLACK: log2 units; p <= 2^slack before the reference point moves (see softmax_tile);
//   0 rescales o on every increase of a row's maximum.
// PV_LAG: 1 multiplies P V a tile behind Q K^T (see "why"); 0 as versions 7 and 8.
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif
#ifndef PV_LAG
#define PV_LAG 1
#endif

// One block: WARPS warps x MT m-tiles x 16 query rows = BR rows, key tiles of BC = 64 keys through
// STAGES shared buffers each for K and V. LAG = 1: iteration j multiplies Q K_j and P_{j-1} V_{j-1}.
template <int HSP, int MT, int WARPS, int STAGES, bool LAG, bool ASYNC>
__device__ __forceinline__ void attention_forward10_body(bf16* out, float* lse, const bf16* qkv, int T, int NH,
                                                         int HS, float sl) {
    constexpr int S = HSP + 8, KT = HSP / 16, DT = HSP / 8;
    constexpr int BR = 16 * MT * WARPS, THREADS = 32 * WARPS, TILE = BC * S;
    constexpr uint32_t TILE_BYTES = TILE * sizeof(bf16);
    static_assert(16 * MT <= BC && BR % BC == 0, "a warp's rows inside one key tile; blocks of whole key tiles");
    static_assert(STAGES >= 2, "at least double buffering");
    extern __shared__ float4 smem4[];
    bf16* Qs = reinterpret_cast<bf16*>(smem4);
    bf16* Ks = Qs + BR * S;           // STAGES buffers of BC rows
    bf16* Vs = Ks + STAGES * TILE;    // STAGES buffers of BC rows

    const int warp = threadIdx.x / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest query tiles first
    const int row0 = q0 + 16 * MT * warp;               // this warp's first query row
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HS, rs = 3 * C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HS;  // q of row 0 of this head
    // Key tiles: the block's up to its last valid row; the warp's up to its own diagonal tile, which
    // holds all its rows (they lie in one 64-aligned range), the only tile it masks. A warp past
    // T has none (it only keeps the barriers).
    const int tiles = (min(q0 + BR, T) - 1) / BC + 1;
    const int mine = row0 < T ? row0 / BC + 1 : 0;

    // Copy group i carries K_i and V_{i - LAG}: issued STAGES - 1 tiles ahead, into the buffers
    // that tile i - STAGES used (free since the barrier that ended the iteration reading them).
    // The steady state (tile i whole, so tile i - LAG too; 16-byte copies) takes a short path:
    // this thread's pieces of the two tiles are one pointer and one add apart.
    const TilePieces<HSP, S, THREADS> piece(q_base, rs, HS);
    auto issue = [&](int i) {
        const int iv = i - LAG;
        if (ASYNC && iv >= 0 && i < tiles && (i + 1) * BC <= T) {
            const bf16* k_src = piece.src + (size_t)i * BC * rs + C;
            piece.copy(smem_addr(Ks + i % STAGES * TILE), k_src, rs);
            piece.copy(smem_addr(Vs + iv % STAGES * TILE), k_src + (C - (size_t)LAG * BC * rs), rs);
        } else {
            if (i < tiles)
                stage_rows<BC, HSP, S, THREADS, ASYNC>(Ks + i % STAGES * TILE, q_base + (size_t)i * BC * rs + C, rs,
                                                       T - i * BC, HS);
            if (iv >= 0 && iv < tiles)
                stage_rows<BC, HSP, S, THREADS, ASYNC>(Vs + iv % STAGES * TILE, q_base + (size_t)iv * BC * rs + 2 * C,
                                                       rs, T - iv * BC, HS);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps the wait counts constant
    };

    // Group 0: Q and the first K (and V); then the other STAGES - 2 lookahead groups.
    stage_rows<BR, HSP, S, THREADS, ASYNC>(Qs, q_base + (size_t)q0 * rs, rs, T - q0, HS);
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) issue(i);
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    uint32_t qf[MT][KT][4];
    q_fragments<MT, KT, S>(qf, Qs + (row0 - q0) * S);
    const uint32_t k_base = k_lane<S>(Ks), v_base = v_lane<S>(Vs);

    float o[MT][DT][4], m[MT][2], l[MT][2];
    uint32_t p[MT][4][4];  // LAG: the previous tile's probabilities, waiting for their V
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < DT; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    // One key tile of this warp's work: QK (scores of tile j: mask if its diagonal), PV (o += P V
    // of tile j - LAG). Compile-time flags, so the steady state is one straight block of code.
    auto step = [&](int j, auto QK, auto MASK, auto PV) {
        float s[MT][8][4], alpha[MT][2];
        uint32_t pn[MT][4][4];
        bool grew = false;
        if constexpr (decltype(QK)::value) {
            qk<MT, KT, S>(s, qf, k_base + j % STAGES * TILE_BYTES);
            if constexpr (decltype(MASK)::value) mask_causal<MT>(s, j * BC, row0);
            grew = softmax_tile<MT>(s, pn, m, l, alpha, sl, RESCALE_SLACK);
        }
        if constexpr (LAG) {
            // Independent of the softmax above: the scheduler may interleave these mma with its
            // MUFU and FFMA work. o is rescaled only after it has taken P_{j-1} V_{j-1} (which
            // is relative to the old maximum).
            if constexpr (decltype(PV)::value) pv<MT, DT, S>(o, p, v_base + (j - 1) % STAGES * TILE_BYTES);
            if constexpr (decltype(QK)::value) {
                if (grew) rescale<MT, DT>(o, alpha);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
#pragma unroll
                        for (int e = 0; e < 4; e++) p[mt][kk][e] = pn[mt][kk][e];
            }
        } else if constexpr (decltype(QK)::value) {
            if (grew) rescale<MT, DT>(o, alpha);
            pv<MT, DT, S>(o, pn, v_base + j % STAGES * TILE_BYTES);
        }
    };
    using Y = Flag<true>;
    using N = Flag<false>;

    for (int j = 0; j < tiles + LAG; j++) {
        issue(j + STAGES - 1);
        const bool qk_on = j < mine, diag = j == mine - 1, pv_on = j >= LAG && j - LAG < mine;
        if (qk_on && !diag && pv_on) step(j, Y{}, N{}, Y{});  // the steady state
        else if (qk_on && diag && pv_on) step(j, Y{}, Y{}, Y{});
        else if (qk_on && !diag) step(j, Y{}, N{}, N{});       // LAG: the first tile
        else if (qk_on) step(j, Y{}, Y{}, N{});                // LAG: the first tile is the diagonal
        else if (pv_on) step(j, N{}, N{}, Y{});                // LAG: the last tile's P V
        cp_async_wait<STAGES - 2>();  // group j + 1 (tile j + 1) has landed, this thread's part
        __syncthreads();              // every thread's part; and tile j's buffers are free
    }

    store_rows<MT, ASYNC>(out, lse, o, m, l, row0, b, h, T, NH, HS);
}

// Two blocks an SM: ptxas may use up to 255 registers (65536 / 256 threads), which the 32-row
// warp needs (see "why"); the shared memory of two blocks fits (144 KB, or 170 KB at HSP 128).
#define ENTRY(name, HSP, MT, STAGES, ASYNC)                                                         \
    extern "C" __global__ void __launch_bounds__(128, 2)                                          \
    name(bf16* out, float* lse, const bf16* qkv, int T, int NH, int HS, float sl) {                \
        attention_forward10_body<HSP, MT, 4, STAGES, PV_LAG, ASYNC>(out, lse, qkv, T, NH, HS, sl); \
    }
ENTRY(attention_forward10_hs64, 64, 2, 3, true)
ENTRY(attention_forward10_hs128, 128, 1, 2, true)
ENTRY(attention_forward10_hs64_any, 64, 2, 3, false)
ENTRY(attention_forward10_hs128_any, 128, 1, 2, false)
