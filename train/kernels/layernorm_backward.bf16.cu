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
*/
// ---- begin last_block_reduce.cuh ----
// last_block_reduce.cuh: layernorm_backward's column sums of the per-block partial rows, in the
// same launch as the row work, by "last block done" tickets in two levels (versions 8, fp32, and
// 9, bf16). Version 8's header tells the pattern and why it is correct and deterministic.
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
