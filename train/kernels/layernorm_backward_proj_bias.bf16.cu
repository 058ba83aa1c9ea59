/*
title = "bf16: version 2 at 12 warps an SM (168 registers, no spill at C = 768)"
builds_on = 2
precision = "bf16"
changed = "Version 2's kernel, compiled under layernorm_backward 12's launch bounds (384, 1): 168 registers a thread instead of 226-236, so an SM holds 12 warps again (block sizes 128, 192 and 384) with no spill in the one-warp-a-row kernel GPT-2's C = 768 runs (ptxas at sm_90a; the two- and three-warp kernels spill 4 and 8 bytes a thread)."
why = """
Version 2 gave the third set of sums room by dropping to 8 warps an SM. Whether 12 warps with two
rows each in flight (24 rows, ~110 KB of loads an SM) beat 8 (16 rows, ~74 KB) is measured here:
at C = 768 ptxas fits the third set of sums in 168 registers without spilling.
"""
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
kernel = "ln_proj_bias3_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias3_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias3_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
runs = ["bs=192 seed=2 SHUFFLE", "bs=384 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 37, C = 768 }, { B = 1, T = 31, C = 1536 }, { B = 1, T = 25, C = 2304 }, { B = 3, T = 9, C = 8 }]
runs = ["bs=384 seed=2 SHUFFLE sms=1"]
*/
// ---- begin layernorm_backward_bf16.cuh ----
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
// ---- begin last_block_reduce.cuh ----
// last_block_reduce.cuh: column sums of per-block partial rows in the same launch as the row work,
// by "last block done" tickets: layernorm_backward's in two levels (versions 8, fp32, and 9, bf16;
// version 8's header tells the pattern and why it is correct and deterministic), and
// matmul_backward_bias 9's in one (took_last_ticket and sum_rows_in_order alone).
//
// Shared because the two versions reduce the same fp32 partial rows the same way; only the last
// step differs, how a column's total goes into the gradients (fp32: added; bf16: added to the
// widened value and rounded once), which each version passes in as a function.
//
// add4(a, b) -> a + b, componentwise, for float4.
//
// took_last_ticket(counter, expected) -> bool
//   After this block's stores, every thread fences, the block waits, and thread 0 takes a ticket
//   (atomicAdd) on *counter. True in every thread of the block iff the ticket was the last of
//   `expected`: every other block that tickets on this counter has then stored its data, visible
//   to this block's __ldcg loads (a second fence). Every thread of the block must call (barriers).
//
// sum_rows_in_order(rows, count, W, emit)
//   Sums `count` rows of W float4 (rows[r * W + e]) column by column, in row order:
//   ((row 0 + row 1) + row 2) + ..., and hands each column's total to emit(e, total). Thread t
//   takes columns t, t + blockDim.x, ...; eight rows' loads in flight before the first is added.
//
// reduce_partials_last_block(partial, team_sums, tickets, C, team_size, add_total)
//   partial holds gridDim.x rows of 2*C floats ([0, C) a block's dbias, [C, 2C) its dweight),
//   this block's row already stored. Teams of team_size consecutive blocks: the last block of
//   each team (tickets[team]) sums its team's rows in block order into the team's row of
//   team_sums (2*C floats a team); the last of those (tickets[teams]) sums the team rows in team
//   order and calls add_total(e, total) for each float4 e of the 2*C columns (e < C/4: dbias's
//   columns 4e..4e+3, the rest dweight's). tickets: teams + 1 ints, zero at the launch. Every
//   thread of the block must call; the others return having done nothing more. The order of the
//   additions depends only on gridDim.x and team_size: bitwise reproducible. C % 4 == 0.

#ifndef KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH
#define KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__device__ __forceinline__ bool took_last_ticket(int* counter, int expected) {
    __threadfence();   // release: this thread's stores reach the whole GPU before what follows
    __syncthreads();   // ... and every thread of the block has fenced before the ticket
    int last = 0;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == expected - 1;
    last = __syncthreads_or(last);  // a barrier that also tells every thread thread 0's verdict
    if (last) __threadfence();      // acquire: the loads that follow come after the ticket
    return last;
}

// __ldcg: the rows were written by other blocks, read them from L2, never from a stale L1 line.
// The adds stay in row order whatever the batch of eight.
template <class Emit>
__device__ __forceinline__ void sum_rows_in_order(const float* rows, int count, int W, Emit emit) {
    const float4* r4 = reinterpret_cast<const float4*>(rows);
    for (int e = threadIdx.x; e < W; e += blockDim.x) {
        float4 total = __ldcg(r4 + e);
        int r = 1;
        for (; r + 8 <= count; r += 8) {
            float4 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __ldcg(r4 + (size_t)(r + k) * W + e);
#pragma unroll
            for (int k = 0; k < 8; k++) total = add4(total, v[k]);
        }
        for (; r < count; r++) total = add4(total, __ldcg(r4 + (size_t)r * W + e));
        emit(e, total);
    }
}

// Team t is blocks [t * team_size, min(G, (t + 1) * team_size)). tickets[t] counts the team's
// finished blocks, tickets[teams] the finished teams; both zeroed by the memset before the launch.
template <class AddTotal>
__device__ __forceinline__ void reduce_partials_last_block(const float* partial, float* team_sums,
                                                           int* tickets, int C, int team_size,
                                                           AddTotal add_total) {
    int G = gridDim.x, teams = (G + team_size - 1) / team_size;
    int team = blockIdx.x / team_size, first = team * team_size;
    int members = min(team_size, G - first);
    int W = C / 2;  // float4 in a row of 2*C floats
    if (!took_last_ticket(&tickets[team], members)) return;  // another member sums this team

    // The team's last block: its rows, in block order, into the team's fp32 row.
    float4* team_row = reinterpret_cast<float4*>(team_sums) + (size_t)team * W;
    sum_rows_in_order(partial + (size_t)first * 2 * C, members, W,
                      [&](int e, float4 total) { team_row[e] = total; });
    if (!took_last_ticket(&tickets[teams], teams)) return;  // another team finishes the sum

    // The last team's last block: the team rows, in team order, into the gradients.
    sum_rows_in_order(team_sums, teams, W, add_total);
}

#endif  // KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH

// ---- end last_block_reduce.cuh ----  // took_last_ticket (fence, barrier, ticket), add4
// ---- begin reduce.cuh ----
// reduce.cuh: warp and block reductions of floats (sum and max).
//
// Shared because the same five-shuffle butterfly and the same two-level block reduction were
// written out in more than a dozen versions across seven families. The versions whose lesson is
// the reduction itself (layernorm_forward 5, softmax_forward 3 and 4, reduce 5, and
// matmul_backward_bias 2's inline loop) still write it out; every other version includes this
// header.
//
// warp_sum<LANES>(v), warp_max<LANES>(v)
//   An xor butterfly over aligned groups of LANES lanes (LANES a power of two <= 32; the default
//   is the whole warp). Every lane of a group gets the group's result. The shuffles use the full
//   mask: all 32 lanes of the warp must make the call (a warp may only leave early as a whole).
//
// block_sum(v), block_max(v)
//   Over every thread of the block: each warp reduces with warp_sum/warp_max, one shared slot per
//   warp, then warp 0 reduces the slots. Every thread gets the result.
//   * blockDim.x must be a multiple of 32 (full warps), at most 1024; every thread must call
//     (there are __syncthreads() inside: never call under a condition that splits the block).
//   * 33 floats of static shared memory (32 warp slots and the result), one buffer for both
//     functions; no dynamic shared memory, so a launch's `shared` does not change.
//   * The barrier after the warp step also orders every thread's earlier shared-memory writes
//     before anything after the call; the last barrier frees the slots, so calls may follow
//     each other directly.

#ifndef KERNELS_COMMON_REDUCE_CUH
#define KERNELS_COMMON_REDUCE_CUH

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// The two-level block reduction behind block_sum and block_max (is_max is a constant at every
// call site, so the unused branches compile away).
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float slots[33];  // [0, 32): one per warp; [32]: the result
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? slots[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) slots[32] = w;
    }
    __syncthreads();
    float result = slots[32];
    __syncthreads();  // the slots are free for the next call
    return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, false); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, true); }

#endif  // KERNELS_COMMON_REDUCE_CUH

// ---- end reduce.cuh ----             // warp_sum
// ---- begin stream_vec.cuh ----
// stream_vec.cuh: eight bf16 held as four raw 32-bit words in registers, for the memory-bound
// bf16 versions that keep many 16-byte loads in flight per lane (encoder_forward 7,
// layernorm_forward 10, fused_residual_forward 6).
//
// Shared because those versions issue 6 to 12 loads of 16 bytes per lane before the first use,
// and how a pack sits in registers decides whether that fits. bf16.cuh's Pack8 is an array of
// eight 16-bit values: ptxas splits each loaded pack into 16-bit halves, and at 12 packs in
// flight per lane that took encoder_forward 7 from ~60 registers to 108 (spilling under its
// 64-register bound). A Word8 is the same 16 bytes as one int4, four 32-bit words; widening and
// rounding are a few integer operations on the words.
//
// Word8 (= int4): eight bf16, element 2j in the low half of word j, 2j+1 in the high half (the
//   memory order, little-endian). The same bytes as a Pack8.
// ld_word8(p), ld_word8_stream(p), st_word8_stream(p, w): one 16-byte access, plain (__ldg) or
//   streaming (__ldcs/__stcs: data touched once, evict first). p must be 16-byte aligned: an
//   element index that is a multiple of 8 from a cudaMalloc'd base.
// widen8(w, f): the eight values as floats, exactly (a bf16 is the top half of a float).
// round8(f) -> Word8: eight floats rounded once to bf16, nearest even (two per conversion
//   instruction on sm_80+; NaN stays NaN).

#ifndef KERNELS_COMMON_STREAM_VEC_CUH
#define KERNELS_COMMON_STREAM_VEC_CUH
// ---- begin bf16.cuh ----
// bf16.cuh: bfloat16 storage for the bf16 versions: the type, 128-bit packs of eight, and
// conversions, so every bf16 kernel moves memory the same way.
//
// Shared because each bf16 version of a memory-bound family reads and writes 16 bytes per thread
// per access (eight bf16 values), converts to float for its arithmetic and back to bf16 to store.
//
// bf16 (= __nv_bfloat16): 1 sign, 8 exponent, 7 mantissa bits; float's range, ~3 significant
//   digits. Arithmetic is done in float; only storage is bf16.
// Pack8: eight bf16 in 16 bytes, aligned to 16. load8/store8 are plain 128-bit accesses;
//   load8_stream/store8_stream use the streaming cache hints (__ldcs/__stcs: data touched once,
//   evict first) for inputs and outputs no later kernel of the same launch reads again.
//   The pointer must be 16-byte aligned: an index that is a multiple of 8 elements from a
//   cudaMalloc'd base.
// to_float / to_bf16: the conversions, round to nearest even.

#ifndef KERNELS_COMMON_BF16_CUH
#define KERNELS_COMMON_BF16_CUH

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

struct alignas(16) Pack8 {
    bf16 v[8];
};

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ Pack8 load8(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
    return out;
}

__device__ __forceinline__ void store8(bf16* p, const Pack8& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

__device__ __forceinline__ Pack8 load8_stream(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
    return out;
}

__device__ __forceinline__ void store8_stream(bf16* p, const Pack8& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

#endif  // KERNELS_COMMON_BF16_CUH

// ---- end bf16.cuh ----

typedef int4 Word8;

__device__ __forceinline__ Word8 ld_word8(const bf16* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ Word8 ld_word8_stream(const bf16* p) { return __ldcs(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ void st_word8_stream(bf16* p, Word8 w) { __stcs(reinterpret_cast<int4*>(p), w); }

__device__ __forceinline__ void widen2(int word, float& lo, float& hi) {
    lo = __uint_as_float(unsigned(word) << 16);
    hi = __uint_as_float(unsigned(word) & 0xffff0000u);
}

__device__ __forceinline__ void widen8(Word8 w, float (&f)[8]) {
    widen2(w.x, f[0], f[1]);
    widen2(w.y, f[2], f[3]);
    widen2(w.z, f[4], f[5]);
    widen2(w.w, f[6], f[7]);
}

__device__ __forceinline__ int round2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    int word;
    memcpy(&word, &h, 4);
    return word;
}

__device__ __forceinline__ Word8 round8(const float (&f)[8]) {
    Word8 w;
    w.x = round2(f[0], f[1]);
    w.y = round2(f[2], f[3]);
    w.z = round2(f[4], f[5]);
    w.w = round2(f[6], f[7]);
    return w;
}

#endif  // KERNELS_COMMON_STREAM_VEC_CUH

// ---- end stream_vec.cuh ----         // Word8 (eight bf16 as an int4 of words), widen8, widen2, round8, round2

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

// ---- end layernorm_backward_bf16.cuh ----  // layernorm_backward12 (layernorm_backward 12's body), SUMS = 3 here

// This module's fp32 column totals of the launch in progress (float4 [0, C/4) dbias's, [C/4, C/2)
// dweight's, [C/2, 3C/4) dproj_bias's) and its count of blocks done. Zero when the module loads;
// the last block of every launch puts them back to zero.
__device__ float4 ln_proj_bias3_totals[3 * 2304 / 4];
__device__ int ln_proj_bias3_tickets;

// 12 warps per SM: the launch bounds hold the registers to 168 (ptxas spills the rest).
extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w1(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<1, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w2(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<2, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w3(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<3, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}
