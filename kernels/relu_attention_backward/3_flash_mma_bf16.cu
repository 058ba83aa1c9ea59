/*
title = "bf16 tensor cores: mma.sync m16n8k16 fed by ldmatrix, streamed tiles by cp.async, a dK/dV kernel and a dQ kernel (no atomics)"
builds_on = 2
precision = "bf16"
changed = """
From version 2: bf16 storage (qkv, dout, dqkv) and every product on the tensor cores:
mma.sync.m16n8k16 (bf16 x bf16 -> fp32) fed by ldmatrix from padded shared tiles, instead of
fp32 FMAs on 4 x 4 register micro-tiles. Each warp owns 16 rows of the block's 64; the streamed
tiles are double-buffered by cp.async. dQ no longer goes through atomics and a memset: a second
kernel owns 64 queries per block, walks the key tiles up to the diagonal, recomputes S and dP
there and sums dQ = dS K in registers, so every element of dqkv is written once, by one thread,
in a fixed order (deterministic). Head sizes up to 128 (version 2: 64, multiples of 4): the
channel tile is 64 or 128 (HS zero-padded), chosen by the launch's `when`.
From attention_backward 7 (the softmax flash backward in bf16): no lse and no D = rowsum(dout *
out) (so no prep kernel and no out argument), P = relu(S) and dS = [S > 0] dP instead of the
exponentials; the mask is the exact sign of the fp32 q.k, tested before any scaling. dQ by
recomputation in its own kernel (as attention_backward 8 does) instead of fp32 atomics into a
scratch. P and dS enter the tensor cores unscaled (relu(S), [S > 0] dP rounded to bf16); the one
factor scale / T is applied in fp32 to dQ, dK and dV on their way out.
"""
why = """
Version 2 spends 64 FFMAs per thread per 4 x 4 x 4 step of each of its five 64 x 64 x 64
products; here a warp issues 32 mma instructions (16 x 64 x 64) per product, and the H100's bf16
tensor cores have ~15x the fp32 FMA rate. bf16 also halves the bytes of every tile.
What keeps them fed:
(1) Operands come from shared memory by ldmatrix, four 8 x 8 blocks per instruction, already in
fragment order; rows padded to HSP + 8 bf16 make every ldmatrix and cp.async conflict-free.
(2) A product's result feeds the next from registers: the accumulator layout of S^T and dP^T is
the A-operand layout of the next mma, so relu(S^T) and [S > 0] dP^T go straight into dV += P^T
dout and dK += dS^T Q (the dQ kernel likewise feeds dS into dQ += dS K): no shared-memory round
trip of dS, one barrier per tile (attention_backward 7: two).
(3) The next streamed tile pair is copied by cp.async while the current one is computed; the
block's own rows stay in shared memory, its outputs in fp32 registers until written once as bf16.
(4) The ReLU is one compare per score; the causal mask only on tiles that touch the diagonal.
Recomputing S and dP for dQ costs 7 products per tile pair instead of 5, but removes version 2's
fp32 atomics, the memset of dqkv and attention_backward 7's fp32 dQ scratch. Blocks with the most
work are launched first. Head sizes not a multiple of 8 take element-by-element loads instead of
cp.async; HS > 64 uses 128-channel tiles with 32-row streamed tiles (the fp32 dK and dV
accumulators stay in registers).

Measurements: results/notes/relu_attention_backward.md.
"""
preconditions = ["HS <= 128"]  # channel tile 64 (HS <= 64) or 128, HS zero-padded
block_sizes = [128]            # 4 warps, 16 own rows each: 64 keys (dK/dV) or 64 queries (dQ) per block

# HS <= 64: 64-channel tiles (pitch 72), 64-row streamed tiles. Shared memory: the block's own
# two 64-row tiles plus two buffers of two streamed tiles.
[[launch]]
kernel = "relu_attention_backward3_dkdv64"
when = "HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 72 * (2 * 64 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_backward3_dq64"
when = "HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 72 * (2 * 64 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

# 64 < HS <= 128: 128-channel tiles (pitch 136), 32-row streamed tiles.
[[launch]]
kernel = "relu_attention_backward3_dkdv128"
when = "HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 136 * (2 * 64 + 4 * 32)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_backward3_dq128"
when = "HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 136 * (2 * 64 + 4 * 32)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 3, NH = 3, HS = 5 }, { B = 1, T = 37, NH = 2, HS = 64 },
  { B = 2, T = 100, NH = 3, HS = 16 }, { B = 1, T = 260, NH = 2, HS = 64 }]
runs = ["bs=128 seed=1 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 1, NH = 2, HS = 64 }, { B = 1, T = 65, NH = 1, HS = 64 },
  { B = 1, T = 130, NH = 1, HS = 16 }, { B = 1, T = 70, NH = 1, HS = 37 },
  { B = 1, T = 40, NH = 2, HS = 128 }, { B = 1, T = 97, NH = 1, HS = 72 },
  { B = 1, T = 33, NH = 1, HS = 100 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=128 seed=2 SHUFFLE"]
*/

#include "relu_attention_bwd_bf16.cuh"  // rb_load_tile, rb_abt, rb_ab, rb_to_a, rb_store

#define RB_WARPS 4
#define RB_THREADS (32 * RB_WARPS)
#define RB_ROWS (16 * RB_WARPS)  // the block's own rows: keys (dK/dV kernel) or queries (dQ kernel)

// One block of either kernel. KEYS: the block owns keys k0 .. k0 + 63 (their K and V rows resident)
// and streams the query tiles (Q, dout) from k0 to T; else it owns queries q0 .. q0 + 63 (Q, dout
// resident) and streams the key tiles (K, V) from 0 up to the diagonal. Warp w owns rows
// rw = r0 + 16 w .. rw + 15. Per streamed tile of N rows, in the warp's registers:
//   X = A B^T, Y = C D^T (16 x N, fp32): KEYS: S^T = K Q^T, dP^T = V dout^T; else S = Q K^T, dP = dout V^T
//   on = [X > 0] and key <= query (X exact: see the family's inputs), P = on X, dS = on Y (bf16)
//   KEYS: dV += P^T dout, dK += dS^T Q;   else: dQ += dS K        (16 x HSP, fp32)
// and scale / T is applied once, at the store. Accumulator element x[j][e] is (own row
// rw + g + 8 (e / 2), streamed row s0 + 8 j + 2 t + e % 2). Rows past T are zero in every tile, so
// their scores are 0 and the ReLU mask already drops them.
template <bool KEYS, int HSP, int N>
__device__ __forceinline__ void relu_bwd3_block(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS,
                                                float scale_T) {
    constexpr int P = RbTile<HSP>::PITCH, NT = N / 8, DT = HSP / 8;
    static_assert(RB_ROWS % N == 0, "streamed tiles must line up with the block's diagonal");
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sA = reinterpret_cast<bf16*>(smem);  // [64][P] own rows: K (KEYS) or Q
    bf16* sC = sA + RB_ROWS * P;               // [64][P] own rows: V or dout
    bf16* sB = sC + RB_ROWS * P;               // [2][N][P] streamed: Q or K
    bf16* sD = sB + 2 * N * P;                 // [2][N][P] streamed: dout or V

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;  // qkv and dqkv row stride
    const bf16* q = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* k = q + C;
    const bf16* v = q + 2 * C;
    const bf16* gr = dout + (size_t)b * T * C + (size_t)h * HS;
    // KEYS: low key tiles see the most queries; else high query tiles see the most keys: first.
    const int r0 = RB_ROWS * (KEYS ? (int)blockIdx.y : (int)(gridDim.y - 1 - blockIdx.y));
    const int rw = r0 + 16 * warp;
    const int first = KEYS ? r0 : 0, end = KEYS ? T : min(r0 + RB_ROWS, T);
    const bf16* a_src = KEYS ? k : q;  // stride rs
    const bf16* c_src = KEYS ? v : gr; // stride rs or C
    const bf16* b_src = KEYS ? q : k;  // stride rs
    const bf16* d_src = KEYS ? gr : v; // stride C or rs
    const size_t c_stride = KEYS ? rs : (size_t)C, d_stride = KEYS ? (size_t)C : rs;

    auto stage = [&](int s0, int buf) {  // streamed rows s0 .. s0 + N - 1 into buffer buf: one group
        rb_load_tile<N, HSP, RB_THREADS>(sB + buf * N * P, b_src, rs, s0, T, HS, qkv);
        rb_load_tile<N, HSP, RB_THREADS>(sD + buf * N * P, d_src, d_stride, s0, T, HS, qkv);
        cp_async_commit();
    };
    rb_load_tile<RB_ROWS, HSP, RB_THREADS>(sA, a_src, rs, r0, T, HS, qkv);
    rb_load_tile<RB_ROWS, HSP, RB_THREADS>(sC, c_src, c_stride, r0, T, HS, qkv);
    stage(first, 0);  // one group: the own rows and the first streamed tile

    float acc[DT][4] = {};   // dK (KEYS) or dQ, unscaled
    float accv[DT][4] = {};  // dV (KEYS only), unscaled
    int buf = 0;
    for (int s0 = first; s0 < end; s0 += N, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile has landed for every thread, and every warp is done with the
                          // previous one (whose buffer is refilled next)
        if (s0 + N < end) stage(s0 + N, buf ^ 1);
        // A warp with no (key <= query) pair in this tile skips it (warp-uniform).
        if (KEYS ? rw > s0 + N - 1 : s0 > rw + 15) continue;
        const bf16* b_s = sB + buf * N * P;
        const bf16* d_s = sD + buf * N * P;

        float x[NT][4] = {}, y[NT][4] = {};
        rb_abt<HSP, NT>(x, y, sA + 16 * warp * P, b_s, sC + 16 * warp * P, d_s);
        const bool edge = KEYS ? rw + 15 > s0 : s0 + N - 1 > rw;  // the tile touches the diagonal
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int own = rw + g + 8 * (e >> 1), other = s0 + 8 * j + 2 * t + (e & 1);
                const int key = KEYS ? own : other, query = KEYS ? other : own;
                const bool on = x[j][e] > 0.0f && (!edge || key <= query);
                x[j][e] = on ? x[j][e] : 0.0f;
                y[j][e] = on ? y[j][e] : 0.0f;
            }
        }
        unsigned f[NT / 2][4];
        if (KEYS) {
            rb_to_a<NT>(f, x);
            rb_ab<HSP, NT / 2>(accv, f, d_s);  // dV += relu(S)^T dout
        }
        rb_to_a<NT>(f, y);
        rb_ab<HSP, NT / 2>(acc, f, b_s);  // dK += dS^T Q, or dQ += dS K
    }

    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    if (KEYS) {
        rb_store<DT>(out + C, rs, rw, T, HS, acc, scale_T);
        rb_store<DT>(out + 2 * C, rs, rw, T, HS, accv, scale_T);
    } else {
        rb_store<DT>(out, rs, rw, T, HS, acc, scale_T);
    }
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dkdv64(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<true, 64, 64>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dq64(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<false, 64, 64>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dkdv128(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<true, 128, 32>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dq128(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<false, 128, 32>(dqkv, dout, qkv, T, NH, HS, scale_T);
}
