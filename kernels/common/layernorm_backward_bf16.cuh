// layernorm_backward_bf16.cuh: layernorm_backward 12's kernel body (bf16, one launch, two rows a
// warp in flight, the last block's rounding in one round trip), for its own version and for
// layernorm_backward_proj_bias's, which also sums the columns of the dinp it writes (the bias
// gradient of the projection the residual stream came out of). Version 12's header tells the
// design; SUMS (2 or 3) is the only difference between the two.
//
// layernorm_backward12<WPR, SUMS>(dinp, dweight, dbias, dsum, dout, inp, weight, mean, rstd, N, C,
//                                 totals, tickets)
//   The layernorm backward of version 12 over N rows of C (C % 8 == 0, C <= 768 * WPR); with
//   SUMS == 3 also dsum[c] += the sum over the rows of dinp[row, c] after this launch's add (fp32
//   over the unrounded values, rounded once). totals (SUMS * C / 4 float4) and tickets: module
//   state, zero when the module loads, put back to zero by the last block.

#ifndef KERNELS_COMMON_LAYERNORM_BACKWARD_BF16_CUH
#define KERNELS_COMMON_LAYERNORM_BACKWARD_BF16_CUH

#include "last_block_reduce.cuh"  // took_last_ticket (fence, barrier, ticket), add4
#include "reduce.cuh"             // warp_sum
#include "stream_vec.cuh"         // Word8 (eight bf16 as an int4 of words), widen8, widen2, round8, round2

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
// k * 32 * WPR + 32 * q + lane, k < 3, of every row (version 10's layout). SUMS column sums: 2
// (dbias, dweight), or 3 with dsum, the sum over the rows of dinp as this launch leaves it.
// Shared memory (4 * (SUMS * C * slots + 128) + 2 * SUMS * C + 1536 * WPR bytes): [slots][SUMS
// * C] floats of column sums, float2 [2][32] of row sums (WPR > 1), the SUMS * C bf16 of dbias,
// dweight (and dsum) as the block found them (SUMS * C / 8 Word8), then the weight's packs 0 ..
// 3 * 32 * WPR (zeros past the row). totals: SUMS * C / 4 float4 and tickets, the module's own,
// zero at the launch and left at zero.
template <int WPR, int SUMS>
__device__ __forceinline__ void layernorm_backward12(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dsum,
                                                     const bf16* dout, const bf16* inp,
                                                     const bf16* weight, const float* mean,
                                                     const float* rstd, int N, int C, float4* totals,
                                                     int* tickets) {
    static_assert(SUMS == 2 || SUMS == 3, "dbias and dweight, and dsum or not");
    constexpr int STEP = 32 * WPR;
    extern __shared__ float4 ln12_smem4[];
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int CP = C / 8, W4 = SUMS * C / 4, Q4 = C / 4;  // packs a row; float4 of a slot's sums, of one sum
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
    const int n_grads = SUMS * CP, n_stash = n_grads + 3 * STEP;
    for (int base = threadIdx.x; base < n_stash; base += 4 * blockDim.x) {
        Word8 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = base + u * blockDim.x, j = i - n_grads;
            if (i < n_grads) {
                const bf16* g = i < CP ? dbias + 8 * i : (i < 2 * CP ? dweight + 8 * (i - CP) : dsum + 8 * (i - 2 * CP));
                v[u] = *reinterpret_cast<const int4*>(g);
            } else if (j < 3 * STEP) {
                v[u] = j < CP ? ld_word8(weight + 8 * j) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = base + u * blockDim.x;
            if (i < n_stash) stash[i] = v[u];
        }
    }
    __syncthreads();  // the weights are read by every warp
    const Word8* wts = stash + n_grads + first;  // pack k * STEP + first is wts[k * STEP]

    float acc_db[3][8], acc_dw[3][8], acc_ds[SUMS == 3 ? 3 : 1][8];
#pragma unroll
    for (int k = 0; k < 3; k++) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            acc_db[k][j] = acc_dw[k][j] = 0.0f;
            if (SUMS == 3) acc_ds[SUMS == 3 ? k : 0][j] = 0.0f;
        }
    }

    // Row `r_row` of round `round`, held in r (its loads issued a round earlier): dinp's row, and
    // its dout and dout * xhat (and the new dinp, unrounded) into the column sums.
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
                    if (SUMS == 3) acc_ds[SUMS == 3 ? k : 0][j] += d[j];  // past the row: never stored
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

    // The block's column sums: slot `slot` writes float4 2p, 2p + 1 (dbias), Q4 + 2p, Q4 + 2p + 1
    // (dweight) and 2 Q4 + 2p, 2 Q4 + 2p + 1 (dsum) of its row for each pack p it owns. Lanes 32 bytes apart would put
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
                    mine[Q4 + 2 * p + h] = vw;
                    if (SUMS == 3) {
                        const float* ds = acc_ds[SUMS == 3 ? k : 0];
                        mine[2 * Q4 + 2 * p + h] = h ? make_float4(ds[4], ds[5], ds[6], ds[7])
                                                     : make_float4(ds[0], ds[1], ds[2], ds[3]);
                    }
                }
            }
        }
    }
    __syncthreads();  // every slot's row written
    for (int e = threadIdx.x; e < W4; e += blockDim.x) {
        float4 total = block_sums[e];
        for (int s = 1; s < slots; s++) total = add4(total, block_sums[(size_t)s * W4 + e]);
        ln12_atomic_add4(totals + e, total);
    }

    // Every block's atomics are in L2 before the last ticket is drawn (took_last_ticket fences).
    if (!took_last_ticket(tickets, gridDim.x)) return;
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
                bf16* grad = e < Q4 ? dbias + 4 * e : (e < 2 * Q4 ? dweight + 4 * (e - Q4) : dsum + 4 * (e - 2 * Q4));
                *reinterpret_cast<Ln12Words4*>(grad) = out;
            }
        }
    }
    if (threadIdx.x == 0) *tickets = 0;
}

#endif  // KERNELS_COMMON_LAYERNORM_BACKWARD_BF16_CUH
