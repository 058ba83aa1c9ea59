/*
title = "bf16 tensor cores, deterministic: version 8's two kernels with 32 rows a warp, each fragment feeding two mma"
builds_on = 8
precision = "bf16"
changed = """
Version 8's split (a dK/dV kernel over key tiles, a dQ kernel over query tiles, no atomics), with
each warp owning 32 rows (two m16 tiles) instead of 16, in blocks of 4 warps x 32 = 128 rows:
* dK/dV: a warp's 32 keys keep their K rows as A fragments in registers for the whole loop (V's
  are reloaded every step: the registers for both are not there); the 64-query tile streamed
  through the cp.async double buffer is taken 16 queries at a time, and every Q or dout fragment
  fetched by ldmatrix (for S^T = K Q^T, dP^T = V dout^T, and through .trans for dV += P^T dout,
  dK += dS^T Q) feeds the warp's two key m-tiles. Whole query tiles take a short copy path (one
  pointer a thread and tensor), and only sub-tiles that touch the diagonal or T are masked (a
  second instantiation of the step).
* dQ: a warp's 32 queries keep their q and dout rows as A fragments; the 64-key tile is taken
  16 keys at a time, and every K or V fragment (for S, dP, and dQ += dS K) feeds two query m-tiles.
* Sub-tiles wholly above the diagonal (every key after every query) are skipped warp by warp.
"""
why = """
Per warp and sub-tile, from the fragment counts (HS = 64):
  dK/dV, 32 keys x 16 queries: 64 mma (16 each for S^T, dP^T, dV, dK) for 24 ldmatrix.x4 (4 each
    of Q, dout, dout^T, Q^T, and 8 of V): 2.7 mma a load. Version 8: 160 mma for 80 loads (2 a
    load), its K and V fragments reloaded every tile.
  dQ, 32 queries x 16 keys: 48 mma (16 each for S, dP, dQ) for 12 ldmatrix.x4 (K, V, K^T): 4 a
    load. Version 8: 96 mma for 48 loads (2 a load).
An SM reads 128 B of shared memory a clock, an ldmatrix.x4 512 B: 4 clocks; an m16n8k16 is
~1.5 clocks of an SM's mma.sync throughput. At 2 mma a load the loads cap the tensor pipe at ~2/3;
at 4 a load they fit under it. The seven products (S and dP computed twice) stay: ~1.4x the
tensor work of one kernel with dQ by atomics (version 11 is that kernel), against no atomics, no
fp32 dQ scratch and one barrier a tile.
Registers (ptxas, sm_90): dK/dV holds K fragments (32), dK and dV (128), S^T and dP^T of a sub-tile
(32) and V's fragments while dP^T is formed (32): 252 (250 at 8 warps), no spills; with V's
fragments kept too it spilled 130-160 bytes. dQ holds q and dout fragments (64), dQ (64), S and dP
of a sub-tile (32): 246 (234), no spills; 32-key sub-tiles spilled. sm_80 spills 16-56 bytes in
dK/dV. Shared memory: 128 K + 128 V rows and 2 x (64 Q + 64 dout) rows of 144 B, 73 KB a block
(dQ: 128 q + 128 dout rows and 2 x (64 K + 64 V)), two blocks an SM.
Block counts at B = 16, T = 1024, NH = 12: 192 heads x 8 tiles = 1536 blocks a kernel on 264
slots, longest first (the first key tiles see the most queries; the last query tiles the most keys).
Block size 256: 8 warps, 256 rows a block, one block an SM; each streamed tile serves twice the rows.
Not yet measured: to be timed on the H100 against versions 7, 8 and cuDNN's 9 in one call.
"""
preconditions = ["HS <= 64"]  # one 64-channel tile (16-byte cp.async rows when HS % 8 == 0, else element by element)
block_sizes = [128, 256]

[scratch]
D = "B * NH * T"

[[launch]]
kernel = "attention_backward10_prep"
grid = "cdiv(B * T * NH, 32)"
block = 256
args = ["D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward10_dkdv4"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * 72 * (2 * 128 + 4 * 64) + 16 * 64"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dkdv8"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 256)"]
block = 256
shared = "2 * 72 * (2 * 256 + 4 * 64) + 16 * 64"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dq4"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * 72 * (2 * 128 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dq8"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 256)"]
block = 256
shared = "2 * 72 * (2 * 256 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[emulate]]
runs = ["seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 100, NH = 3, HS = 16 }]
runs = ["bs=256 seed=1 EARLY SHUFFLE"]

# whole 64-row tiles over several key and query blocks, HS 32 and 48, T just past and short of a
# 128-row block; both block sizes, the 256-thread blocks in a shuffled order
[[emulate]]
sizes = [{ B = 1, T = 300, NH = 1, HS = 64 }, { B = 2, T = 256, NH = 2, HS = 32 },
  { B = 1, T = 520, NH = 1, HS = 48 }, { B = 1, T = 129, NH = 2, HS = 64 }, { B = 1, T = 127, NH = 1, HS = 24 }]
runs = ["bs=128 seed=3 PRIORITY sched_seed=3", "bs=256 seed=3 PRIORITY sched_seed=3 order=7"]
*/

#include "attention_backward_bf16.cuh"  // load_tile_async, load_queries, load_a16, abt2, ab2, c_to_a, Flag, store_rows, dot_rows

#define BQ 64  // queries per streamed tile of the dK/dV kernel
#define BK 64  // keys per streamed tile of the dQ kernel

extern "C" __global__ void attention_backward10_prep(float* D, const bf16* dout, const bf16* out,
                                                     int B, int T, int NH, int HS) {
    dot_rows(D, nullptr, dout, out, B, T, NH, HS);
}

// dK and dV of 32 WARPS keys: warp w owns keys kw = k0 + 32 w .. kw + 31 (m-tiles kw, kw + 16) and
// walks the query tiles from the block's first key to T, 16 queries at a time. Accumulator element
// x[mt][j][e] of S^T, dP^T is (key kw + 16 mt + g + 8 (e / 2), query qs + 8 j + 2 t + e % 2).
template <int WARPS>
__device__ __forceinline__ void dkdv10(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                       const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BC = 32 * WARPS, DT = AB_DH / 8, KT = AB_DH / 16;
    constexpr int PASS = THREADS / 8;  // rows a pass of 16-byte copies covers (8 a row)
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sK = reinterpret_cast<bf16*>(smem);  // [BC][PITCH]
    bf16* sV = sK + BC * AB_PITCH;             // [BC][PITCH]
    bf16* sQ = sV + BC * AB_PITCH;             // [2][BQ][PITCH]
    bf16* sG = sQ + 2 * BQ * AB_PITCH;         // [2][BQ][PITCH]
    float* sL = reinterpret_cast<float*>(sG + 2 * BQ * AB_PITCH);  // [2][BQ]
    float* sD = sL + 2 * BQ;                                        // [2][BQ]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * BC, kw = k0 + 32 * warp;
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;
    const bf16* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* lrow = lse + (size_t)bh * T;
    const float* drow = D + (size_t)bh * T;
    const float sl2 = scale * AB_LOG2E;

    // A whole query tile with HS % 8 == 0 (every tile but a sequence's last): this thread's 16-byte
    // pieces sit at one pointer plus multiples of PASS rows; pieces past HS are zero-filled from
    // the row's start. Anything else goes through load_queries' general path.
    const int cr = threadIdx.x / 8, cc = 8 * (threadIdx.x % 8);
    const bool cvalid = cc < HS;
    const bf16* qsrc = qbase + (size_t)cr * rs + (cvalid ? cc : 0);
    const bf16* gsrc = gbase + (size_t)cr * C + (cvalid ? cc : 0);
    auto stage = [&](int q0, int buf) {  // one cp.async group: the query tile q0 into buffer buf
        if (HS % 8 == 0 && q0 + BQ <= T) {
            const uint32_t qd = smem_addr(sQ + (buf * BQ + cr) * AB_PITCH + cc);
            const uint32_t gd = smem_addr(sG + (buf * BQ + cr) * AB_PITCH + cc);
            const bf16* qp = qsrc + (size_t)q0 * rs;
            const bf16* gp = gsrc + (size_t)q0 * C;
#pragma unroll
            for (int k = 0; k < BQ / PASS; k++) {
                cp_async_16(qd + 2 * k * PASS * AB_PITCH, qp + (size_t)k * PASS * rs, cvalid);
                cp_async_16(gd + 2 * k * PASS * AB_PITCH, gp + (size_t)k * PASS * C, cvalid);
            }
            if (threadIdx.x < BQ) {
                cp_async_4(sL + buf * BQ + threadIdx.x, lrow + q0 + threadIdx.x, true);
                cp_async_4(sD + buf * BQ + threadIdx.x, drow + q0 + threadIdx.x, true);
            }
            cp_async_commit();
        } else {
            load_queries<THREADS>(sQ + buf * BQ * AB_PITCH, sG + buf * BQ * AB_PITCH, sL + buf * BQ, sD + buf * BQ,
                                  qbase, rs, gbase, C, lrow, drow, q0, T, HS);
        }
    };
    load_tile_async<BC, THREADS>(sK, qbase + C, rs, k0, T, HS, qkv);
    load_tile_async<BC, THREADS>(sV, qbase + 2 * C, rs, k0, T, HS, qkv);
    stage(k0, 0);  // group 0: K, V and the first query tile

    unsigned ka[2][KT][4];  // this warp's K rows as A fragments
    float dk[2][DT][4] = {}, dv[2][DT][4] = {};

    // 16 queries qs = q0 + 16 sub of the tile in buffer buf against the warp's 32 keys. MASK: the
    // sub-tile touches the diagonal or the sequence end (p = 0 where key > query or query >= T).
    auto step = [&](int q0, int sub, int buf, auto MASK) {
        const bf16* q_s = sQ + (buf * BQ + 16 * sub) * AB_PITCH;
        const bf16* g_s = sG + (buf * BQ + 16 * sub) * AB_PITCH;
        const int col = buf * BQ + 16 * sub + 2 * t;  // lse / D of query q0 + 16 sub + 2 t + 8 j + (e & 1)
        float s[2][2][4] = {}, dp[2][2][4] = {};
        abt2<2>(s, ka, q_s);  // S^T = K Q^T
        {
            unsigned va[2][KT][4];  // V's fragments, reloaded every step: not the registers to keep them
#pragma unroll
            for (int mt = 0; mt < 2; mt++) load_a16(va[mt], sV + (32 * warp + 16 * mt) * AB_PITCH);
            abt2<2>(dp, va, g_s);  // dP^T = V dout^T
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const float2 l2 = *reinterpret_cast<const float2*>(sL + col + 8 * j);
            const float2 d2 = *reinterpret_cast<const float2*>(sD + col + 8 * j);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(fmaf(s[mt][j][e], sl2, -((e & 1) ? l2.y : l2.x) * AB_LOG2E));
                    if constexpr (decltype(MASK)::value) {
                        const int query = q0 + 16 * sub + 2 * t + 8 * j + (e & 1), key = kw + 16 * mt + g + 8 * (e >> 1);
                        if (key > query || query >= T) p = 0.0f;
                    }
                    s[mt][j][e] = p;
                    dp[mt][j][e] = p * (dp[mt][j][e] - ((e & 1) ? d2.y : d2.x));
                }
        }
        unsigned a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], s[mt], 0);  // P^T (32 keys x 16 queries)
        ab2(dv, a, g_s);                                            // dV += P^T dout
#pragma unroll
        for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], dp[mt], 0);  // dS^T
        ab2(dk, a, q_s);                                             // dK += dS^T Q
    };

    int buf = 0;
    for (int q0 = k0; q0 < T; q0 += BQ, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile landed everywhere; every warp is done with the other buffer
        if (q0 == k0) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) load_a16(ka[mt], sK + (32 * warp + 16 * mt) * AB_PITCH);
        }
        if (q0 + BQ < T) stage(q0 + BQ, buf ^ 1);
#pragma unroll 1
        for (int sub = 0; sub < BQ / 16; sub++) {
            const int qs = q0 + 16 * sub;
            if (qs >= T || qs + 15 < kw) continue;  // past the end, or every query before every key
            if (kw + 31 > qs || qs + 16 > T) step(q0, sub, buf, Flag<true>{});
            else step(q0, sub, buf, Flag<false>{});
        }
    }
    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        store_rows<DT>(out + C, rs, kw + 16 * mt, T, 0, HS, dk[mt], scale);
        store_rows<DT>(out + 2 * C, rs, kw + 16 * mt, T, 0, HS, dv[mt], 1.0f);
    }
}

// dQ of 32 WARPS queries: warp w owns queries qw = q0 + 32 w .. qw + 31 (m-tiles qw, qw + 16) and
// walks the key tiles 0, BK, ... up to its block's last query, 16 keys at a time. Accumulator
// element x[mt][j][e] of S, dP is (query qw + 16 mt + g + 8 (e / 2), key ks + 8 j + 2 t + e % 2).
template <int WARPS>
__device__ __forceinline__ void dq10(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BR = 32 * WARPS, DT = AB_DH / 8, KT = AB_DH / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sQ = reinterpret_cast<bf16*>(smem);  // [BR][PITCH] (read once into registers)
    bf16* sG = sQ + BR * AB_PITCH;             // [BR][PITCH]
    bf16* sK = sG + BR * AB_PITCH;             // [2][BK][PITCH]
    bf16* sV = sK + 2 * BK * AB_PITCH;         // [2][BK][PITCH]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR, qw = q0 + 32 * warp;  // last tiles first
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;
    const bf16* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const float sl2 = scale * AB_LOG2E;

    // lse (times log2 e) and D of this thread's four rows, qw + 16 mt + g + 8 r.
    float l2[2][2], d[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = qw + 16 * mt + g + 8 * r;
            l2[mt][r] = row < T ? lse[(size_t)bh * T + row] * AB_LOG2E : 0.0f;
            d[mt][r] = row < T ? D[(size_t)bh * T + row] : 0.0f;
        }

    auto stage = [&](int k0, int buf) {
        load_tile_async<BK, THREADS>(sK + buf * BK * AB_PITCH, qbase + C, rs, k0, T, HS, qkv);
        load_tile_async<BK, THREADS>(sV + buf * BK * AB_PITCH, qbase + 2 * C, rs, k0, T, HS, qkv);
        cp_async_commit();
    };
    load_tile_async<BR, THREADS>(sQ, qbase, rs, q0, T, HS, qkv);
    load_tile_async<BR, THREADS>(sG, dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T, HS, dout);
    stage(0, 0);  // one group: Q, dout and the first key tile

    unsigned qa[2][KT][4], ga[2][KT][4];  // this warp's q and dout rows as A fragments
    float dq[2][DT][4] = {};
    const int kend = min(q0 + BR, T);  // keys after the block's last query are masked for all of it
    int buf = 0;
    for (int k0 = 0; k0 < kend; k0 += BK, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this key tile landed everywhere; every warp is done with the other buffer
        if (k0 == 0) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                load_a16(qa[mt], sQ + (32 * warp + 16 * mt) * AB_PITCH);
                load_a16(ga[mt], sG + (32 * warp + 16 * mt) * AB_PITCH);
            }
        }
        if (k0 + BK < kend) stage(k0 + BK, buf ^ 1);
#pragma unroll 1
        for (int sub = 0; sub < BK / 16; sub++) {
            const int ks = k0 + 16 * sub;
            if (qw >= T || ks > qw + 31) continue;  // no row of this warp, or every key after every query
            const bf16* k_s = sK + (buf * BK + 16 * sub) * AB_PITCH;
            float s[2][2][4] = {}, dp[2][2][4] = {};
            abt2<2>(s, qa, k_s);                                     // S = Q K^T
            abt2<2>(dp, ga, sV + (buf * BK + 16 * sub) * AB_PITCH);  // dP = dout V^T
            const bool edge = ks + 15 > qw;  // some key after some query of this warp
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1, query = qw + 16 * mt + g + 8 * r, key = ks + 8 * j + 2 * t + (e & 1);
                        float p = exp2f(fmaf(s[mt][j][e], sl2, -l2[mt][r]));
                        if (edge && key > query) p = 0.0f;  // keys >= T are after every query < T
                        dp[mt][j][e] = p * (dp[mt][j][e] - d[mt][r]);
                    }
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], dp[mt], 0);
            ab2(dq, a, k_s);  // dQ += dS K over the sub-tile's 16 keys
        }
    }
    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) store_rows<DT>(out, rs, qw + 16 * mt, T, 0, HS, dq[mt], scale);
}

#define ENTRY(name, body, WARPS, MIN_BLOCKS)                                                               \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)                                   \
    name(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D, int T, int NH,  \
         int HS, float scale) {                                                                            \
        body<WARPS>(dqkv, dout, qkv, lse, D, T, NH, HS, scale);                                            \
    }
ENTRY(attention_backward10_dkdv4, dkdv10, 4, 2)
ENTRY(attention_backward10_dkdv8, dkdv10, 8, 1)
ENTRY(attention_backward10_dq4, dq10, 4, 2)
ENTRY(attention_backward10_dq8, dq10, 8, 1)
