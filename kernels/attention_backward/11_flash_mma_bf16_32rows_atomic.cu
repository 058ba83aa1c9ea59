/*
title = "bf16 tensor cores, one kernel: version 10's key blocks of 32 keys a warp, dQ from dS^T in shared memory by fp32 atomics"
builds_on = 10
precision = "bf16"
deterministic = false  # dQ is summed over key blocks with float atomicAdd: its last bits vary run to run
changed = """
Version 10's dK/dV kernel (a warp owns 32 keys: K fragments in registers, every Q and dout
fragment feeding two mma, the query tile taken 16 queries at a time, the mask only on diagonal
sub-tiles) with dQ added in the same pass instead of a second kernel: each warp writes its dS^T
(bf16, as it feeds dK) into a shared [key][query] tile; after a barrier, warp w computes dQ for 16
queries of the tile (WARPS = 8: 16 queries x 32 channels) over the block's keys up to the
diagonal, dS read through ldmatrix .trans, K through .trans, and adds it to an fp32 (B, T, C)
scratch by atomics (float2 on sm_90). A first kernel computes D and zeroes the scratch, a last
one scales it into dqkv's q part as bf16 (version 7's scheme).
"""
why = """
Five products per (key, query) pair instead of version 10's seven (S and dP are not recomputed
for dQ): 5/7 of the tensor work, in exchange for dS^T's round trip through shared memory, a second
barrier a tile, the dQ product's poorer reuse (a warp's 16 x 64 dQ share reads 40 ldmatrix.x4 for
64 mma) and 16 x 64 fp32 atomics a warp a tile (~57 M at B = 16, T = 1024, NH = 12, with the
scratch's zeroing and read-back, 2 x 50 MB). The GPU decides between the two: version 10 is the
deterministic one.
Registers (ptxas, sm_90): 245 (252 at 8 warps), no spills; the dQ product's 32 accumulators live
only between the tile's second barrier and its atomics. Shared memory: version 10's 73 KB plus the
dS^T tile (128 rows of 144 B), 91 KB a block: two blocks an SM.
Not yet measured: to be timed on the H100 against versions 7, 10 and cuDNN's 9 in one call.
"""
preconditions = ["HS <= 64"]
block_sizes = [128, 256]

[scratch]
D = "B * NH * T"   # dout . out per row, fp32
dq = "B * T * C"   # dQ accumulator, fp32, laid out (B, T, NH, HS)

[[launch]]
kernel = "attention_backward11_prep"
grid = "cdiv(B * T * NH, 32)"   # 8 lanes per (b, t, h) row, 32 rows per block
block = 256
args = ["dq", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward11_keys4"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * 72 * (3 * 128 + 4 * 64) + 16 * 64"
args = ["dq", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward11_keys8"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 256)"]
block = 256
shared = "2 * 72 * (3 * 256 + 4 * 64) + 16 * 64"
args = ["dq", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward11_dq"
grid = "cdiv(B * T * C, 8 * 256)"
block = 256
args = ["dqkv", "dq", "B * T", "C", "1.0 / sqrt(HS)"]

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

#include "attention_backward_bf16.cuh"  // load_tile_async, load_queries, load_a16, abt2, ab2, mma_ab, c_to_a, Flag, store_rows, dot_rows, rows_to_bf16

#define BQ 64  // queries per streamed tile

// D = dout . out per (b, t, h) row, and the fp32 dQ accumulator zeroed.
extern "C" __global__ void attention_backward11_prep(float* dq, float* D, const bf16* dout, const bf16* out,
                                                     int B, int T, int NH, int HS) {
    dot_rows(D, dq, dout, out, B, T, NH, HS);
}

// dqkv's q part = bf16(scale * dq).
extern "C" __global__ void attention_backward11_dq(bf16* dqkv, const float* dq, int BT, int C, float scale) {
    rows_to_bf16(dqkv, 3 * C, dq, BT, C, scale);
}

// dst[0] += x and, if both, dst[1] += y (one float2 atomic on sm_90 where the pair is aligned).
__device__ __forceinline__ void atomic_add_pair(float* dst, float x, float y, bool both) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (both && (reinterpret_cast<size_t>(dst) & 7) == 0) {
        atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
        return;
    }
#endif
    atomicAdd(dst, x);
    if (both) atomicAdd(dst + 1, y);
}

template <int WARPS>
__device__ __forceinline__ void key_block11(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv,
                                            const float* lse, const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BC = 32 * WARPS, DT = AB_DH / 8, KT = AB_DH / 16;
    constexpr int PASS = THREADS / 8;  // rows a pass of 16-byte copies covers (8 a row)
    constexpr int DQ_NT = DT / (WARPS / 4);  // dQ: n-tiles of channels a warp (WARPS = 8: half the head each)
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sK = reinterpret_cast<bf16*>(smem);  // [BC][PITCH]
    bf16* sV = sK + BC * AB_PITCH;             // [BC][PITCH]
    bf16* sQ = sV + BC * AB_PITCH;             // [2][BQ][PITCH]
    bf16* sG = sQ + 2 * BQ * AB_PITCH;         // [2][BQ][PITCH]
    float* sL = reinterpret_cast<float*>(sG + 2 * BQ * AB_PITCH);  // [2][BQ]
    float* sD = sL + 2 * BQ;                                        // [2][BQ]
    bf16* sS = reinterpret_cast<bf16*>(sD + 2 * BQ);                // [BC][PITCH]: dS^T of the tile, [key][query]

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
        for (int mt = 0; mt < 2; mt++) {
            c_to_a<2>(a[mt], dp[mt], 0);  // dS^T, and into sS for dQ: rows (keys) g, g + 8, columns 2t, 2t + 8
            bf16* d = sS + (32 * warp + 16 * mt + g) * AB_PITCH + 16 * sub + 2 * t;
            *reinterpret_cast<unsigned*>(d) = a[mt][0];
            *reinterpret_cast<unsigned*>(d + 8 * AB_PITCH) = a[mt][1];
            *reinterpret_cast<unsigned*>(d + 8) = a[mt][2];
            *reinterpret_cast<unsigned*>(d + 8 * AB_PITCH + 8) = a[mt][3];
        }
        ab2(dk, a, q_s);  // dK += dS^T Q
    };

    // dQ[q0 + 16 (w % 4) + .., 32 (w / 4) + ..] += dS K over the block's keys, from sS and sK, by
    // fp32 atomics. A = dS (queries x keys) is sS transposed: ldmatrix .trans, lane L addressing key
    // 16 kk + 8 (m / 2) + L % 8, query column 8 (m % 2) of its 16, m = L / 8 (the A quarters' order).
    // Key chunks past the warp's last query are skipped (dS 0 there; their rows of sS may be stale:
    // the warp that owns those keys skipped the step); so are rows past T.
    const int wq = warp % 4, c0 = 8 * DQ_NT * (warp / 4);
    auto tile_dq = [&](int q0) {
        const int qd = q0 + 16 * wq;
        if (qd >= T) return;
        float acc[DQ_NT][4] = {};
        const int m = lane / 8;
        const bf16* a_row = sS + (8 * (m / 2) + lane % 8) * AB_PITCH + 16 * wq + 8 * (m % 2);
#pragma unroll 2
        for (int kk = 0; kk < BC / 16 && k0 + 16 * kk <= qd + 15; kk++) {
            unsigned a[4];
            ldmatrix_x4_trans(a, a_row + 16 * kk * AB_PITCH);
            mma_ab<DQ_NT>(acc, a, sK + 16 * kk * AB_PITCH + c0);
        }
        float* dst0 = dq + ((size_t)b * T + qd) * C + (size_t)h * HS;
#pragma unroll
        for (int n = 0; n < DQ_NT; n++) {
            const int col = c0 + 8 * n + 2 * t;
            if (col >= HS) continue;
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const int row = g + 8 * half;
                if (qd + row >= T) continue;
                atomic_add_pair(dst0 + (size_t)row * C + col, acc[n][2 * half], acc[n][2 * half + 1], col + 1 < HS);
            }
        }
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
        __syncthreads();  // every warp's dS^T is in sS
        tile_dq(q0);
    }
    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        store_rows<DT>(out + C, rs, kw + 16 * mt, T, 0, HS, dk[mt], scale);
        store_rows<DT>(out + 2 * C, rs, kw + 16 * mt, T, 0, HS, dv[mt], 1.0f);
    }
}


#define ENTRY(name, WARPS, MIN_BLOCKS)                                                                     \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)                                   \
    name(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D, int T, \
         int NH, int HS, float scale) {                                                                    \
        key_block11<WARPS>(dq, dqkv, dout, qkv, lse, D, T, NH, HS, scale);                                 \
    }
ENTRY(attention_backward11_keys4, 4, 2)
ENTRY(attention_backward11_keys8, 8, 1)
