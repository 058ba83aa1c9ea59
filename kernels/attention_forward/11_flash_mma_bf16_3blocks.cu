/*
title = "bf16 flash attention, three blocks an SM: version 10's 32-row warps without the lag, Q read from shared memory"
builds_on = 10
precision = "bf16"
changed = """
Version 10 at HS <= 64 traded occupancy for instruction-level parallelism inside a warp: 255
registers a thread (Q fragments 32, o 64, s 64, the lagging P 32), two 4-warp blocks an SM, and
P V a tile behind Q K^T so that one warp's mma and MUFU work overlap. Here the other way round:
* No lag: P V of tile j in iteration j (version 10's PV_LAG = 0 step), the lagging P's 32
  registers gone.
* Q fragments are read from shared memory (Q stays resident there for the block) one 16-channel
  step at a time inside Q K^T: 8 registers instead of 32, two more ldmatrix.x4 per step (8 a
  tile, on top of the 32 of K and V).
* __launch_bounds__(128, 3): ptxas holds the kernel to 168 registers, and three blocks (12 warps)
  share an SM, 3 x 72 KB of shared memory; the warp scheduler overlaps one warp's softmax with
  another's mma instead.
HS > 64 (head padded to 128) runs version 10's kernel unchanged.
"""
why = """
Version 10 delivers ~210 TFLOP/s at B = 8, T = 1024 (62 us; cuDNN 52 us): about a third of what
mma.sync can issue, with each of tensor time, MUFU time and issue slots estimated below it per
tile. What is left is latency: a warp's step is a chain (Q K^T -> max -> exp -> sum -> P V), and
two warps a scheduler have little to switch to while one waits on it. Three blocks give three
warps a scheduler. The costs: 25% more ldmatrix for Q K^T (shared reads 40 instead of 32 x4 loads
a tile), the lost lag, and whatever ptxas spills at 168 registers (its report says). HS64_LAG = 1
builds this kernel with the lag, for measuring what each half is worth.
Not yet measured: to be timed on the H100 against version 10 and cuDNN in one call.
"""
preconditions = ["HS <= 128"]

# HS a multiple of 8: 16-byte cp.async rows; others: element-wise loads, the same kernel otherwise.
# HSP = 64 for HS <= 64 (smaller heads zero-padded): 32 rows a warp, 128-row blocks, 3 stages.
# HSP = 128: 16 rows a warp (Q and o would need 192 registers at 32), 64-row blocks, 2 stages
# (3 would take 119 KB, one block an SM).
[[launch]]
kernel = "attention_forward11_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward11_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward11_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward11_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[emulate]]
runs = ["seed=0 PRIORITY sched_seed=1"]

[[emulate]]
sizes = [{ B = 1, T = 300, NH = 1, HS = 64 }, { B = 1, T = 140, NH = 1, HS = 24 }]
runs = ["seed=0 PRIORITY sched_seed=1"]
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
// HS64_LAG: 1 multiplies P V a tile behind Q K^T at HSP 64 (version 10's lag); 0, the default here,
//   in the same iteration (fewer registers: three blocks an SM).
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif
#ifndef HS64_LAG
#define HS64_LAG 0
#endif

// One block: WARPS warps x MT m-tiles x 16 query rows = BR rows, key tiles of BC = 64 keys through
// STAGES shared buffers each for K and V. LAG = 1: iteration j multiplies Q K_j and P_{j-1} V_{j-1}.
template <int HSP, int MT, int WARPS, int STAGES, bool LAG, bool ASYNC, bool QREG>
__device__ __forceinline__ void attention_forward11_body(bf16* out, float* lse, const bf16* qkv, int T, int NH,
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
    uint32_t qf[QREG ? MT : 1][KT][4];  // QREG: the warp's Q fragments, kept; else read from Qs every tile
    if constexpr (QREG) q_fragments<MT, KT, S>(qf, Qs + (row0 - q0) * S);
    const uint32_t q_lane_addr = q_lane<S>(Qs + (row0 - q0) * S);
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
            if constexpr (QREG) qk<MT, KT, S>(s, qf, k_base + j % STAGES * TILE_BYTES);
            else qk_smem<MT, KT, S>(s, q_lane_addr, k_base + j % STAGES * TILE_BYTES);
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

// HSP 64: three blocks an SM (ptxas held to 168 registers a thread; 3 x 72 KB of shared memory),
// no lag, Q read from shared memory every tile. HSP 128: version 10's kernel (two blocks, the lag,
// Q kept in registers).
#define ENTRY(name, HSP, MT, STAGES, ASYNC, BLOCKS, LAG, QREG)                                        \
    extern "C" __global__ void __launch_bounds__(128, BLOCKS)                                       \
    name(bf16* out, float* lse, const bf16* qkv, int T, int NH, int HS, float sl) {                  \
        attention_forward11_body<HSP, MT, 4, STAGES, LAG, ASYNC, QREG>(out, lse, qkv, T, NH, HS, sl); \
    }
ENTRY(attention_forward11_hs64, 64, 2, 3, true, 3, HS64_LAG, false)
ENTRY(attention_forward11_hs128, 128, 1, 2, true, 2, 1, true)
ENTRY(attention_forward11_hs64_any, 64, 2, 3, false, 3, HS64_LAG, false)
ENTRY(attention_forward11_hs128_any, 128, 1, 2, false, 2, 1, true)
