/*
title = "bf16 tensor cores: mma.m16n8k16, ldmatrix, cp.async double buffering, P kept in registers"
builds_on = 2
precision = "bf16"
changed = """
Version 2's one-kernel structure (a block owns 64 query rows and streams 64-key tiles up to the
diagonal, no T x T buffer) moved onto bf16 tensor cores, in the form of attention_forward 8:
q, k, v and out in bf16; S = Q K^T and O += P V as mma.sync m16n8k16 with fp32 accumulators;
operands fetched from shared memory with ldmatrix (.trans for V); Q's fragments held in
registers for the whole loop; K/V tiles copied with cp.async into a second buffer while the
current one is multiplied. Each of the 4 warps owns 16 query rows (version 2: 16 threads of 4 x 4
micro-tiles per 64 rows).
P = relu(S / sqrt(HS)) / T is one FMUL and one FMAX per score in fp32 (scale / T passed as one
factor: folding it into Q, as version 2 does, would round it into bf16 Q), then rounded to bf16
pairs straight into the A fragments of P V, as attention_forward 8 does with its probabilities.
Against attention_forward 8: no online softmax (no running max, no row sum, no exp2, no rescaling
of O, no shuffles, no lse), so no per-row state at all; out is o rounded to bf16 once, with no
division. The head is zero-padded to HSP = 64 or 128, so every head size up to 128 runs.
"""
why = """
Version 2 does its two 64 x 64 x 64 products per tile with FP32 FMAs from shared memory (256
FLOPs a clock per H100 SM); mma.sync bf16 runs them at roughly ten times that rate, and the
operands cost one ldmatrix (512 bytes per warp instruction) per 2 mma instead of a float4 load
per 16 FMAs. The scores never reach shared memory: an S accumulator pair of 8-key n-tiles is
element for element the A fragment of P for the next mma. bf16 halves the bytes of qkv and out
(and of the shared tiles: 5 tiles of 64 x 72 bf16 = 45 KB at HSP 64, 4 blocks an SM).
Compared with the softmax flash kernel, the ReLU removes most of what sits between the two mma
phases: attention_forward 8 spends per score one FFMA and one MUFU.EX2 (16 a clock per SM, the
other pipe that can bound it) plus the row max/sum shuffles and the 32/64 FMULs of rescaling O per
tile; here it is one FMUL + one FMAX per score and the 16 cvt packs. Fewer registers too (no m,
l, and s dies into the packed P), so 4 blocks (16 warps) an SM fit at HSP = 64.
Loads overlap compute (tile j + 1 in flight while tile j is multiplied, two barriers a tile);
rows padded to HSP + 8 elements so ldmatrix is conflict-free; only the diagonal tile is masked
and the loop stops there; the longest query tiles are scheduled first.

Measurements: results/notes/relu_attention_forward.md.
"""
preconditions = ["HS <= 128"]

# head sizes that are a multiple of 8: 16-byte cp.async rows; others: element-wise loads, the same
# kernel otherwise. HSP = 64 for HS <= 64 (smaller heads zero-padded), 128 above. Any T: rows and
# keys past T are zero-filled, and rows past T are not stored.
[[launch]]
kernel = "relu_attention_forward3_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_forward3_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_forward3_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_forward3_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[emulate]]
sizes = [{ B = 1, T = 1, NH = 1, HS = 1 }, { B = 1, T = 33, NH = 2, HS = 37 },
  { B = 1, T = 40, NH = 1, HS = 72 }]
runs = ["seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 3, NH = 3, HS = 5 }, { B = 1, T = 1, NH = 2, HS = 64 },
  { B = 1, T = 20, NH = 1, HS = 99 }]
runs = ["seed=1 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 37, NH = 2, HS = 64 }, { B = 1, T = 65, NH = 2, HS = 64 }]
runs = ["seed=2 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 100, NH = 3, HS = 16 }, { B = 1, T = 130, NH = 2, HS = 16 }]
runs = ["seed=0 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 260, NH = 2, HS = 64 }]
runs = ["seed=1 PRIORITY", "seed=5 SHUFFLE"]

[[emulate]]
sizes = [{ B = 3, T = 67, NH = 5, HS = 12 }, { B = 1, T = 70, NH = 1, HS = 128 }]
runs = ["seed=2 SHUFFLE"]

[[emulate]]
sizes = [{ B = 2, T = 70, NH = 1, HS = 37 }]
runs = ["seed=1 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 65, NH = 1, HS = 64 }]
runs = ["seed=7 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 140, NH = 1, HS = 37 }]
runs = ["seed=3 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 200, NH = 1, HS = 64 }]
runs = ["seed=4 EARLY PRIORITY"]
*/

#include "attention_fwd_mma.cuh"  // stage_rows, k_lane, v_lane, q_fragments, qk, mask_causal, pv
#include "bf16.cuh"
#include "mma.cuh"                // mma_bf16_16816, ldmatrix, cp.async: the fragment layouts

#define BR 64        // query rows per block: 4 warps x 16
#define BC 64        // keys per tile (BC == BR: a block's diagonal is one key tile)
#define THREADS 128

// P of one 64-key tile as P V's A fragments: p[0][kk] = the bf16 pairs of keys 16 kk .. 16 kk + 15,
// { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] } (attention_fwd_mma.cuh's layout),
// each score x factor (= 1 / (sqrt(HS) T) > 0) through the ReLU in fp32 first. A masked score
// (-inf) gives fmaxf(-inf, 0) = 0.
__device__ __forceinline__ void relu_tile(uint32_t (&p)[1][4][4], const float (&s)[1][8][4], float factor) {
    auto f = [factor](float x) { return fmaxf(x * factor, 0.0f); };
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        p[0][kk][0] = pack_bf16x2(f(s[0][2 * kk][0]), f(s[0][2 * kk][1]));
        p[0][kk][1] = pack_bf16x2(f(s[0][2 * kk][2]), f(s[0][2 * kk][3]));
        p[0][kk][2] = pack_bf16x2(f(s[0][2 * kk + 1][0]), f(s[0][2 * kk + 1][1]));
        p[0][kk][3] = pack_bf16x2(f(s[0][2 * kk + 1][2]), f(s[0][2 * kk + 1][3]));
    }
}

// out (B, T, C) = o rounded to bf16: o[0][n][e] is row row0 + g + 8 (e / 2), channel 8 n + 2 t +
// (e % 2) of head h of sequence b. Rows >= T and channels >= HS are skipped. PAIRS: the two
// channels of a lane in one 4-byte store (HS even, so d < HS covers d + 1 and the address is
// 4-byte aligned).
template <bool PAIRS, int DT>
__device__ __forceinline__ void store_out(bf16* out, const float (&o)[1][DT][4], int row0, int b, int h, int T,
                                          int NH, int HS) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int C = NH * HS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T) continue;
        bf16* dst = out + ((size_t)b * T + row) * C + (size_t)h * HS;
#pragma unroll
        for (int n = 0; n < DT; n++) {
            const int d = 8 * n + 2 * t;
            const float x = o[0][n][2 * r], y = o[0][n][2 * r + 1];
            if (PAIRS) {
                if (d < HS) *reinterpret_cast<uint32_t*>(dst + d) = pack_bf16x2(x, y);
            } else {
                if (d < HS) dst[d] = to_bf16(x);
                if (d + 1 < HS) dst[d + 1] = to_bf16(y);
            }
        }
    }
}

template <int HSP, bool ASYNC>
__device__ __forceinline__ void relu_attention_forward3_body(bf16* out, const bf16* qkv, int T, int NH, int HS,
                                                             float factor) {
    constexpr int S = HSP + 8;    // shared row stride in elements (144 / 272 bytes: 16 mod 128)
    constexpr int KT = HSP / 16;  // k-steps of Q K^T
    constexpr int DT = HSP / 8;   // 8-channel n-tiles of O
    constexpr int TILE = BC * S;
    extern __shared__ float4 smem4[];
    bf16* Qs = reinterpret_cast<bf16*>(smem4);
    bf16* Ks = Qs + BR * S;       // two buffers of BC rows
    bf16* Vs = Ks + 2 * TILE;     // two buffers of BC rows

    const int warp = threadIdx.x / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int row0 = q0 + 16 * warp;                    // this warp's first query row
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HS, rs = 3 * C;                  // qkv row stride
    const bf16* base = qkv + (size_t)b * T * rs + (size_t)h * HS;  // q of row 0 of this head
    const int tiles = q0 / BC + 1;                      // key tiles 0 .. the diagonal one

    // Q (one group), then K/V tile 0 (a second group): wait for Q only, take its fragments.
    stage_rows<BR, HSP, S, THREADS, ASYNC>(Qs, base + (size_t)q0 * rs, rs, T - q0, HS);
    cp_async_commit();
    stage_rows<BC, HSP, S, THREADS, ASYNC>(Ks, base + C, rs, T, HS);
    stage_rows<BC, HSP, S, THREADS, ASYNC>(Vs, base + 2 * C, rs, T, HS);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[1][KT][4];
    q_fragments<1, KT, S>(qf, Qs + 16 * warp * S);
    const uint32_t k_rows = k_lane<S>(Ks), v_rows = v_lane<S>(Vs);  // ldmatrix rows, buffer 0

    float o[1][DT][4];
#pragma unroll
    for (int n = 0; n < DT; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;

    for (int j = 0; j < tiles; j++) {
        const int k0 = j * BC;
        if (j + 1 < tiles) {  // prefetch tile j + 1 into the buffer tile j - 1 used
            const bf16* next = base + (size_t)(k0 + BC) * rs;
            const int nb = (j + 1) % 2 * TILE;
            stage_rows<BC, HSP, S, THREADS, ASYNC>(Ks + nb, next + C, rs, T - k0 - BC, HS);
            stage_rows<BC, HSP, S, THREADS, ASYNC>(Vs + nb, next + 2 * C, rs, T - k0 - BC, HS);
            cp_async_commit();
            cp_async_wait<1>();  // all groups but the newest: tile j has landed (this thread's part)
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();         // ... and every thread's part
        const uint32_t buf = j % 2 * TILE * sizeof(bf16);

        float s[1][8][4];
        qk<1, KT, S>(s, qf, k_rows + buf);
        if (k0 == q0) mask_causal<1>(s, k0, row0);  // the diagonal tile: keys past the row
        uint32_t p[1][4][4];
        relu_tile(p, s, factor);
        pv<1, DT, S>(o, p, v_rows + buf);
        __syncthreads();  // everyone is done with buffer j % 2 before iteration j + 1 refills it
    }

    store_out<ASYNC>(out, o, row0, b, h, T, NH, HS);  // ASYNC implies HS % 8 == 0, so HS even
}

// Blocks per SM for the register budget: HSP = 64: 4 (<= 128 registers; Q 16, s 32, P 16, o 32),
// with 4 x 45 KB of shared memory; HSP = 128: 2 (Q and o double; 2 x 85 KB of shared memory).
#define ENTRY(name, HSP, ASYNC, MIN_BLOCKS)                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)                             \
    name(bf16* out, const bf16* qkv, int T, int NH, int HS, float factor) {                        \
        relu_attention_forward3_body<HSP, ASYNC>(out, qkv, T, NH, HS, factor);                     \
    }
ENTRY(relu_attention_forward3_hs64, 64, true, 4)
ENTRY(relu_attention_forward3_hs128, 128, true, 2)
ENTRY(relu_attention_forward3_hs64_any, 64, false, 4)
ENTRY(relu_attention_forward3_hs128_any, 128, false, 2)
