/*
title = "bf16, one launch: two rows a warp in flight as 32-bit words, the last block's rounding in one round trip"
builds_on = 11
precision = "bf16"
changed = "Version 11's design with three of its costs removed. Rows sit in registers as Word8 (an int4 of 32-bit words, stream_vec.cuh) in two buffers that take turns (the loop unrolled twice), so a warp's next row really is in flight while it works on the current one (in version 11, ptxas rebuilt the prefetched Pack8 from 16-bit halves halfway through the current row, and the warp waited there); about 600 instructions a warp-row instead of 866. The last block issues all its loads of the fp32 totals before using any, and adds them to a copy of dbias and dweight that each block stashed in shared memory when it started: one L2 round trip where version 11 looped, one DRAM round trip per blockDim columns. The block's column sums cross shared memory without bank conflicts and leave as float4 atomics on sm_90."
why = """
Version 11's SASS and its dependence on the block size show where its time above the model goes:
(1) the last block adds the totals into the bf16 gradients in 2C / blockDim iterations, each
waiting on a cold load before issuing the next (a DRAM round trip an iteration, hence smaller
blocks are slower); (2) the prefetch did not prefetch: the per-pack `ok ? load : zero` on Pack8's
16-bit fields made ptxas rebuild the next row's registers from halves right after the current
row's first pass, so the warp waited there and then worked with nothing in flight; (3) the block's
column sums crossed shared memory with two-way bank conflicts.

What changes:
1. Two buffers, no copies. A warp holds two rows as Word8 (int4 of 32-bit words); while it works
   on one, the other is in flight, and a written row's buffer is refilled with the row two rounds
   on. The loop is unrolled twice so the buffers take turns (layernorm_forward 10's scheme): no
   register copy ever waits on a load. Still 168 registers, no spills, 12 warps an SM.
2. Less arithmetic a value: widening is a shift or a mask of a word, xhat one FFMA, dinp's term
   three FFMAs; the weights come from shared memory with immediate offsets.
3. The last block in one round trip: every block copies dbias and dweight into shared memory at
   its start (overlapping its first loads), and the last block issues all its __ldcg of the totals
   before using any.
4. Shared memory without conflicts: lanes 4-7 of each quarter-warp store their second float4
   first; each thread then sums one float4 of columns over the block's slots in order and adds it
   with one float4 atomic (sm_90's red.global.add.v4.f32; four float atomics on sm_80).
The rest is version 11's: one launch, no scratch, no memset, the same module state and caveats,
not deterministic; dinp rounded once, dweight and dbias summed in fp32 and rounded once.

The analysis in numbers, the prediction and the measurements: results/notes/layernorm_backward.md.
"""
# Word8 rows (C % 8 == 0); a row takes at most three warps of 768 columns; the accumulator holds
# 2 x 2304 floats. Every block size keeps 12 warps per SM (3, 2 or 1 blocks).
preconditions = ["C % 8 == 0", "C <= 2304"]
block_sizes = [128, 192, 384]
deterministic = false

[derived]
warps_per_row = "cdiv(C, 768)"
row_slots = "(block_size // 32) // warps_per_row"  # rows a block works on at once
blocks_per_sm = "12 // (block_size // 32)"         # 12 warps of <= 168 registers per SM
rounds = "cdiv(N, SMS * blocks_per_sm * row_slots)"
groups = "cdiv(N, rounds * row_slots)"             # as few blocks as keep every round full

[[launch]]
kernel = "layernorm_backward12_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward12_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward12_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY", "bs=128 seed=1 SHUFFLE", "bs=128 seed=2 SHUFFLE",
  "bs=192 seed=0 PRIORITY", "bs=192 seed=1 SHUFFLE", "bs=192 seed=2 SHUFFLE", "bs=384 seed=0 PRIORITY",
  "bs=384 seed=1 SHUFFLE", "bs=384 seed=2 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600 }]
runs = ["bs=192 seed=2 SHUFFLE order=1", "bs=192 seed=2 SHUFFLE order=2"]

[[emulate]]
sizes = [{ B = 4, T = 33, C = 768 }]
runs = ["bs=128 seed=2 SHUFFLE order=1", "bs=128 seed=2 SHUFFLE order=2"]

[[emulate]]
sizes = [{ B = 1, T = 37, C = 768 }, { B = 1, T = 25, C = 776 }, { B = 1, T = 31, C = 1536 },
  { B = 1, T = 25, C = 2304 }, { B = 3, T = 9, C = 8 }]
runs = ["bs=128 seed=0 PRIORITY sms=1", "bs=192 seed=1 SHUFFLE sms=1", "bs=384 seed=2 PRIORITY sms=1"]
*/

#include "last_block_reduce.cuh"  // took_last_ticket (fence, barrier, ticket), add4
#include "reduce.cuh"             // warp_sum
#include "stream_vec.cuh"         // Word8 (eight bf16 as an int4 of words), widen8, widen2, round8, round2

// The fp32 column totals of the launch in progress (float4 [0, C/4) dbias's, [C/4, C/2)
// dweight's) and the count of blocks done with them. Zero when the module loads; the last block
// of every launch puts them back to zero.
__device__ float4 layernorm_backward12_totals[2 * 2304 / 4];
__device__ int layernorm_backward12_tickets;

// Four bf16 (8 bytes) as two words: a gradient's four columns that one float4 of totals adds to.
struct alignas(8) Ln12Words4 {
    int lo, hi;
};

// A lane's share of one row: its 3 packs of dout, inp and dinp, and the row's mean and rstd.
// Packs past the row and rows past N are zeros (m = s = 0): they add nothing to any sum.
struct Ln12Row {
    Word8 g[3], x[3], d[3];
    float m, s;
};

// Issue the loads of `row` (nothing when !live) into r; pack k * STEP + first of the row.
template <int STEP>
__device__ __forceinline__ void ln12_issue(Ln12Row& r, const bf16* dout, const bf16* inp, const bf16* dinp,
                                           const float* mean, const float* rstd, int row, bool live,
                                           int first, int CP, int C) {
    const Word8 zero = {0, 0, 0, 0};
    size_t offset = (size_t)(live ? row : 0) * C;
#pragma unroll
    for (int k = 0; k < 3; k++) {
        int p = k * STEP + first;
        bool ok = live && p < CP;
        r.g[k] = ok ? ld_word8_stream(dout + offset + 8 * p) : zero;
        r.x[k] = ok ? ld_word8_stream(inp + offset + 8 * p) : zero;
        r.d[k] = ok ? ld_word8_stream(dinp + offset + 8 * p) : zero;
    }
    r.m = live ? mean[row] : 0.0f;
    r.s = live ? rstd[row] : 0.0f;
}

__device__ __forceinline__ void ln12_atomic_add4(float4* p, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(p, v);  // red.global.add.v4.f32: one request for four columns
#else
    float* f = reinterpret_cast<float*>(p);
    atomicAdd(f, v.x);
    atomicAdd(f + 1, v.y);
    atomicAdd(f + 2, v.z);
    atomicAdd(f + 3, v.w);
#endif
}

// WPR warps a row (C <= 768 * WPR): lane `lane` of part q of a row's warps owns packs
// k * 32 * WPR + 32 * q + lane, k < 3, of every row (version 10's layout). Shared memory
// (4 * (2C * slots + 128 + C) + 1536 * WPR bytes): [slots][2C] floats of column sums, float2
// [2][32] of row sums (WPR > 1), the 2C bf16 of dbias and dweight as the block found them (C/4
// Word8), then the weight's packs 0 .. 3 * 32 * WPR (zeros past the row).
template <int WPR>
__device__ __forceinline__ void layernorm_backward12(bf16* dinp, bf16* dweight, bf16* dbias,
                                                     const bf16* dout, const bf16* inp,
                                                     const bf16* weight, const float* mean,
                                                     const float* rstd, int N, int C) {
    constexpr int STEP = 32 * WPR;
    extern __shared__ float4 ln12_smem4[];
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int CP = C / 8, W4 = C / 2;  // packs a row; float4 of a slot's 2C sums
    const int slots = warps / WPR, slot = warp / WPR;
    const bool active = slot < slots;  // a leftover warp (warps % WPR) only meets the barriers
    const int first = (warp % WPR) * 32 + lane;
    const int band = gridDim.x * slots;  // rows a round
    const int rounds = (N + band - 1) / band;
    float4* block_sums = ln12_smem4;                                         // [slots][W4]
    float2* row_sums = reinterpret_cast<float2*>(ln12_smem4 + slots * W4);  // [2][32]
    Word8* stash = reinterpret_cast<Word8*>(ln12_smem4 + slots * W4 + 32);  // dbias, dweight, weight
    const float inv_C = 1.0f / C;
    const Word8 zero = {0, 0, 0, 0};

    int row = blockIdx.x * slots + slot;
    Ln12Row a, b;
    ln12_issue<STEP>(a, dout, inp, dinp, mean, rstd, row, active && row < N, first, CP, C);
    ln12_issue<STEP>(b, dout, inp, dinp, mean, rstd, row + band, active && row + band < N, first, CP, C);

    // While the first two rows fly, two copies into shared memory, all loads before any store:
    // the gradients as they are now (the last block adds to these; no block writes them before
    // every block has taken its ticket), and the weight packs the block's lanes own, zeros past
    // the row, read for every row with one base register and immediate offsets.
    const int n_stash = C / 4 + 3 * STEP;
    for (int base = threadIdx.x; base < n_stash; base += 4 * blockDim.x) {
        Word8 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = base + u * blockDim.x, j = i - C / 4;
            if (i < C / 4) v[u] = *reinterpret_cast<const int4*>(i < CP ? dbias + 8 * i : dweight + 8 * (i - CP));
            else if (j < 3 * STEP) v[u] = j < CP ? ld_word8(weight + 8 * j) : zero;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = base + u * blockDim.x;
            if (i < n_stash) stash[i] = v[u];
        }
    }
    __syncthreads();  // the weights are read by every warp
    const Word8* wts = stash + C / 4 + first;  // pack k * STEP + first is wts[k * STEP]

    float acc_db[3][8], acc_dw[3][8];
#pragma unroll
    for (int k = 0; k < 3; k++) {
#pragma unroll
        for (int j = 0; j < 8; j++) acc_db[k][j] = acc_dw[k][j] = 0.0f;
    }

    // Row `r_row` of round `round`, held in r (its loads issued a round earlier): dinp's row, and
    // its dout and dout * xhat into the column sums.
    auto work = [&](const Ln12Row& r, int r_row, int round) {
        const bool valid = active && r_row < N;  // the same for the whole warp
        const float s = r.s, ms = r.m * r.s;
        float sum_dn = 0.0f, sum_dnx = 0.0f;
        if (valid) {
#pragma unroll
            for (int k = 0; k < 3; k++) {
                float g[8], x[8], w[8];
                widen8(r.g[k], g);
                widen8(r.x[k], x);
                widen8(wts[k * STEP], w);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float dn = w[j] * g[j];
                    sum_dn += dn;
                    sum_dnx = fmaf(dn, fmaf(x[j], s, -ms), sum_dnx);
                }
            }
        }
        sum_dn = warp_sum(sum_dn);
        sum_dnx = warp_sum(sum_dnx);
        if (WPR > 1) {  // a row spans WPR warps: add their sums, in part order, in every one of them
            float2* mine = row_sums + (round & 1) * 32;  // two rounds' slots: one barrier a round
            if (lane == 0) mine[warp] = make_float2(sum_dn, sum_dnx);
            __syncthreads();
            if (active) {
                sum_dn = sum_dnx = 0.0f;
                for (int q = 0; q < WPR; q++) {
                    float2 t = mine[slot * WPR + q];
                    sum_dn += t.x;
                    sum_dnx += t.y;
                }
            }
        }
        const float mean_dn = sum_dn * inv_C, mean_dnx = sum_dnx * inv_C;
        if (valid) {
            bf16* out = dinp + (size_t)r_row * C;
#pragma unroll
            for (int k = 0; k < 3; k++) {
                int p = k * STEP + first;
                float g[8], x[8], w[8], d[8];
                widen8(r.g[k], g);
                widen8(r.x[k], x);
                widen8(wts[k * STEP], w);
                widen8(r.d[k], d);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float xhat = fmaf(x[j], s, -ms);
                    float t = fmaf(-mean_dnx, xhat, fmaf(w[j], g[j], -mean_dn));
                    d[j] = fmaf(s, t, d[j]);
                    acc_db[k][j] += g[j];
                    acc_dw[k][j] = fmaf(g[j], xhat, acc_dw[k][j]);
                }
                if (p < CP) st_word8_stream(out + 8 * p, round8(d));
            }
        }
    };

    // The buffers take turns: a holds rounds 0, 2, 4, ..., b rounds 1, 3, 5, ...; a buffer is
    // refilled with its row two rounds on as soon as it has been worked on.
    for (int round = 0; round < rounds; round += 2, row += 2 * band) {
        work(a, row, round);
        ln12_issue<STEP>(a, dout, inp, dinp, mean, rstd, row + 2 * band, active && row + 2 * band < N,
                         first, CP, C);
        if (round + 1 == rounds) break;  // the same in every warp of the grid
        work(b, row + band, round + 1);
        ln12_issue<STEP>(b, dout, inp, dinp, mean, rstd, row + 3 * band, active && row + 3 * band < N,
                         first, CP, C);
    }

    // The block's column sums: slot `slot` writes float4 2p, 2p + 1 (dbias) and W4/2 + 2p,
    // W4/2 + 2p + 1 (dweight) of its row for each pack p it owns. Lanes 32 bytes apart would put
    // a quarter-warp's 16-byte stores on every bank twice: lanes 4-7 of each quarter store their
    // second half first, so each store instruction covers 128 distinct bytes a quarter-warp.
    if (active) {
        float4* mine = block_sums + (size_t)slot * W4;
        const int flip = (lane >> 2) & 1;
#pragma unroll
        for (int k = 0; k < 3; k++) {
            int p = k * STEP + first;
            if (p < CP) {
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    int h = hh ^ flip;
                    const float* db = acc_db[k];
                    const float* dw = acc_dw[k];
                    float4 vb = h ? make_float4(db[4], db[5], db[6], db[7]) : make_float4(db[0], db[1], db[2], db[3]);
                    float4 vw = h ? make_float4(dw[4], dw[5], dw[6], dw[7]) : make_float4(dw[0], dw[1], dw[2], dw[3]);
                    mine[2 * p + h] = vb;
                    mine[W4 / 2 + 2 * p + h] = vw;
                }
            }
        }
    }
    __syncthreads();  // every slot's row written
    float4* totals = layernorm_backward12_totals;
    for (int e = threadIdx.x; e < W4; e += blockDim.x) {
        float4 total = block_sums[e];
        for (int s = 1; s < slots; s++) total = add4(total, block_sums[(size_t)s * W4 + e]);
        ln12_atomic_add4(totals + e, total);
    }

    // Every block's atomics are in L2 before the last ticket is drawn (took_last_ticket fences).
    if (!took_last_ticket(&layernorm_backward12_tickets, gridDim.x)) return;
    const Ln12Words4* grads = reinterpret_cast<const Ln12Words4*>(stash);  // four bf16 per float4 e
    const float4 zero4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int base = threadIdx.x; base < W4; base += 4 * blockDim.x) {
        float4 t[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {  // every load before the first use: one round trip
            int e = base + u * blockDim.x;
            if (e < W4) t[u] = __ldcg(totals + e);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int e = base + u * blockDim.x;
            if (e < W4) {
                totals[e] = zero4;  // ready for the next launch
                Ln12Words4 gw = grads[e];
                float f[4];
                widen2(gw.lo, f[0], f[1]);
                widen2(gw.hi, f[2], f[3]);
                Ln12Words4 out;
                out.lo = round2(f[0] + t[u].x, f[1] + t[u].y);
                out.hi = round2(f[2] + t[u].z, f[3] + t[u].w);
                bf16* grad = e < C / 4 ? dbias + 4 * e : dweight + 4 * (e - C / 4);
                *reinterpret_cast<Ln12Words4*>(grad) = out;
            }
        }
    }
    if (threadIdx.x == 0) layernorm_backward12_tickets = 0;
}

// 12 warps per SM: the launch bounds hold the registers to 168.
extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w1(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<1>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w2(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<2>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w3(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<3>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
