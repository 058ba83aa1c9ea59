/*
title = "bf16, one launch: two rows a warp in flight as 32-bit words, the last block's rounding in one round trip"
precision = "bf16"
changed = "Version 11's design with three of its costs removed. Rows sit in registers as Word8 (an int4 of 32-bit words, stream_vec.cuh) in two buffers that take turns (the loop unrolled twice), so a warp's next row really is in flight while it works on the current one (in version 11, ptxas rebuilt the prefetched Pack8 from 16-bit halves halfway through the current row, and the warp waited there); about 600 instructions a warp-row instead of 866. The last block issues all its loads of the fp32 totals before using any, and adds them to a copy of dbias and dweight that each block stashed in shared memory when it started: one L2 round trip where version 11 looped, one DRAM round trip per blockDim columns. The block's column sums cross shared memory without bank conflicts and leave as float4 atomics on sm_90."
why = """
Version 11 takes 29.4 us at B=8, T=1024, C=768 with blocks of 384, 32.4 us at 192 and 35.9 us at
128; a copy of its 50.4 MB takes 25.3 us. It reads 37.7 MB (dout, inp, dinp) and writes 12.6 MB
(dinp). Version 10's model (4.5 us + reads / 3.17 TB/s + writes / 2.65 TB/s) gives 21.1 us.
Version 11's SASS (sm_90) and its block-size dependence show where the other 8 us go.

1. The last block's loop. After taking the last ticket, the last block adds the 2C totals into
   the bf16 gradients in 2C / blockDim iterations. Each iteration loads a bf16 gradient that is
   cold (the bench flushes L2) and must wait for it before issuing the next load: 4 DRAM round
   trips at block 384, 8 at 192, 12 at 128. Going from 384 to 192 costs 3.0 us and from 192 to
   128 another 3.5 us, 4 iterations each time: 0.75-0.9 us an iteration, one unloaded DRAM round
   trip. So about 3 us of the 29.4 is this loop, and it explains all of the block-size
   dependence. (The atomics also triple from 384 to 128, 175K to 525K, but these timings cannot
   separate the two causes.)
2. The prefetch did not prefetch. The next row's 9 packs were loaded at the top of the loop.
   But a Pack8 is eight 16-bit fields, and the per-pack `ok ? load : zero` led ptxas to rebuild
   the next row's registers from 16-bit halves: 144 PRMT a row, placed among the current row's
   shuffles, right after its first pass. So the warp waited there for the next row. It then did
   the second pass (a shuffle reduction, 24 values of arithmetic, the stores) with nothing of
   its own in flight. One warp-row is 4.6 KB of loads, so 12 warps an SM kept at most 55 KB in
   flight, and much less on average. Little's law asks for 40-50 KB an SM (3 TB/s x 1.5-2 us
   of loaded latency / 114 SMs). The loop was also 866 instructions a warp-row. A round of 12
   rows an SM therefore needs 2.6K issue cycles (1.5 us) against 2.8 us of DRAM time for the
   round's 8.4 MB over the grid: with little overlap, the compute adds to the wait.
3. The block's column sums crossed shared memory with two-way bank conflicts. A lane's 8
   columns start 32 bytes after its neighbour's, so the eight 16-byte stores of a quarter-warp
   hit every bank twice: 72 KB took ~0.65 us to write instead of ~0.33 (at 128 B a clock an SM).

What changes.
1. Two buffers, no copies. A warp holds two rows as Word8 (36 registers a row). While it works
   on one, the other is in flight. Once a row is written, the warp refills that buffer with its
   row two rounds on. The loop is unrolled twice so the buffers take turns (layernorm_forward
   10's scheme): no register copy ever waits on a load. In the SASS, every row load is first
   read more than 630 instructions after it is issued (one row's work; the loop is ~1200 for two
   rows). It still fits in 168 registers (166-168, no spills on sm_80 or sm_90), so an SM still
   holds 12 warps, each with one or two rows in flight: 55-110 KB an SM.
2. Less arithmetic a value. Widening is a shift or a mask of a word. xhat = x * rstd - mean *
   rstd is one FFMA. dinp's term is three FFMAs: fma(w, g, -mean_dn), then fma(-mean_dnx,
   xhat, .), then fma(rstd, ., dinp). The weights come from shared memory (one base register,
   immediate offsets, zeros past the row) instead of per-row global loads with predicates. A
   warp-row is now ~600 instructions: a round takes 1.8K issue cycles (1.0 us) of its 2.8 us.
3. The last block in one round trip. At its start, once its first two rows' loads are issued
   (so the waits overlap), every block copies dbias and dweight as they are (2C bf16) and its
   lanes' weight packs into shared memory. The last block issues all its __ldcg of the totals
   (up to four float4 a thread) before using any. So after the ticket it pays one L2 round trip,
   its stores, and the zeroing of the totals and the counter for the next launch (as version
   11 does).
4. Shared memory without conflicts. Lanes 4-7 of each quarter-warp store their second float4
   first, so each quarter-warp's stores cover 128 distinct bytes. Each thread then sums one float4
   of columns over the block's slots in slot order and adds it with one float4 atomic (sm_90's
   red.global.add.v4.f32; four float atomics on sm_80). At C = 768 that is 384 atomics a block.

The rest is version 11's: one launch, no scratch, no memset; the same module state with its
caveats (launches of this module run in order on one stream); not deterministic, since the fp32
totals land in any order. The precision is what the contract asks. dinp is widened, its fp32
term added, and the sum rounded once. dweight and dbias are summed in fp32 (registers over a
warp's rows, the block's slots in order, fp32 atomics) and rounded once by the last block.

Prediction at block 384: the rows near the model, 21 us plus the ~1.5 us that version 10 runs
above it. The tail is ~1.5-2 us: shared memory 0.65, the atomics and the fenced ticket ~0.5-0.8,
the last block's round trip ~0.4. That gives ~24 us (23-25), 1.05x the copy's speed, against
version 11's 29.4 and version 7's 34.0 (deterministic). Blocks of 128 and 192 should now take
about as long as 384. What remains between them measures the atomics (3x and 2x as many).

Measured on the H100 (bench --all, three runs of 2026-11-24): 26.0-26.2 us against the copy's 25.7-26.3 us (0.99-1.00x); version 11 28.5-29.0 us, version 7 34.1-34.4 us.
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
