/*
title = "bf16, one pass over dout: each block learns which of its tokens repeat from one scan of the ids; the rest need no coordination"
precision = "bf16"
changed = "Version 6 partitions the destinations (block g owns the tokens v % G == g: it reads all ids and sorts its positions before its first dout load, and dwpe's blocks read dout a second time). This version partitions dout itself: a thread owns (t, 8 channels) and walks b, reading each dout chunk once; it sums dwpe's B rows in registers and adds each row to its token's dwte row itself, in fp32, rounding once. What makes that safe without atomics: each block scans all the ids once against a hash table of its own tokens in shared memory, so every position knows how many positions in the batch hold its token. A token held once (85% of positions at the default sizes) is updated by its position's thread directly; a repeated one only by its leader, which sums the group's rows in ascending position order. One launch, no scratch, no global atomics, deterministic; the dwte rows to be updated are prefetched to L2 (sm_90 bulk prefetch) while the block scans."
why = """
Version 6 (30.4 µs at B=8 T=1024 C=768 V=50257, uniform random tokens; a copy of the same 40.9
MB: 20.0 µs) starts every one of its 512 token blocks with a walk over all 8192 ids: 8 rounds,
each an L2 round trip and a barrier, then compaction, a counting sort and a plan, all before its
first dout load, so DRAM idles at the start; then the dwpe blocks read dout again.

Here what a thread must read does not depend on the scan, so it is requested first: the block's
32 token ids and the thread's B = 8 dout chunks (16-byte loads, 128 bytes) from DRAM, before
anything else. The block owns 384 consecutive units (t, 8 channels), i.e. 4 time steps x 96
chunks, so 32 positions; it puts their tokens in a hash table in shared memory (128 slots) and a
4096-bit filter, asks L2 (cp.async.bulk.prefetch, sm_90) for those tokens' dwte row ranges and
its dwpe rows, and scans all N ids from L2 (int4 loads, four in flight a thread: two round
trips). An id that is none of the block's 32 tokens, nearly all of them, fails the filter (a
shared load and a few integer operations, no branch; 1% pass by accident and are probed); a hit
counts the position against the token, keeps it (the first 8) and takes the minimum of
mix(position), a bijective hash. After two barriers every position knows k, the number of
positions in the whole batch that hold its token, and its leader (the smallest mix).

Then each thread adds its 8 dout chunks into dwpe's sum (in order of b), and for each of its
positions with k = 1 (85% of positions: (N-1)/V = 0.16, e^-0.16 = 0.85): load the dwte chunk (an
L2 hit by now), add the row in fp32, round once, store; with k > 1, only the leader's thread
does it, which sums the group's k rows in ascending position order (the others re-read: 633
rows, 1 MB, mostly from L2). Every dwte and dwpe chunk has exactly one writer in the grid, so
there are no atomics, and every row is summed in fp32 and rounded once (family.toml: bf16
atomics fail the tolerance).

Tokens held by more than 8 positions (none at these sizes, but frequent tokens in real text, and
V = 1 or 2) are summed after the block's own work by the block owning the leader's chunks: a
warp per (32 chunks, one of 8 fixed ranges of positions), the ranges' fp32 partial sums added in
order through shared memory. The leader is the smallest mix rather than the first position so
that frequent tokens, whose first positions crowd the start of every sequence, do not pile onto
the first blocks; still, all of one such token goes through one SM (or two), as in versions 5
and 6: a token holding a large share of a batch is a tail.

The order of every addition (kernels/common/encoder_backward_fast.cuh states it) is set by the
data alone: the bits are the same at every block size and on every run.

Bytes: dout read once (12.6 MB, plus the leaders' 1 MB of re-reads, mostly L2 hits), 7559
distinct dwte rows read and written (11.6 + 11.6 MB; the family's count takes all 8192, so it is
a little generous) plus 633 rows prefetched for non-leaders (1 MB, wasted), dwpe 1.6 + 1.6 MB:
~28 MB read and 13 MB written, where a copy of the family's 40.9 MB reads and writes 20.5 MB
each; reads are the cheaper, so the copy's time is within reach if DRAM stays busy. The scan
costs L2 and issue slots, not DRAM: 256 blocks x 32 KB = 8.4 MB of L2 reads and, a block, 8192
filter tests (~7 instructions each: ~1.6k warp instructions, ~0.5 µs of one SM's issue), while
the block's dout loads are in flight. (A hash probe per id, branching on every id, cost twice
the instructions.) Registers: 80 (launch bounds (384, 2); at 512 threads a block, 100, so 384 is
the largest block), so two 384-thread blocks an SM and the 256 blocks are one wave; 768 threads
x 128 bytes = 98 KB of dout in flight per SM at the start, and the dwte rows already on their
way to L2 through the bulk prefetches, which hold no registers (Little's law wants ~25-35 KB per
SM). What is left on a block's critical path: the own ids (a DRAM round trip), the scan (two L2
round trips and the probes), then L2 hits. Predicted: 19-21 µs at the default sizes (the goal is
21 µs; the copy takes 20.0 µs). What could cost more than predicted: the wave's blocks reach the
dwte phase together and wait on prefetches that DRAM serves in its own order; a profile would
show it as DRAM idle near the end.

The header is written for any element type: with fp32 rows (Row<float, 4>, 4 channels a unit) it
is a deterministic fp32 version, which tests/test_encoder_backward_fast.py builds to check the
formula bit for bit (bf16's one rounding hides most fp32 order differences); on the emulator it
also stays within the fp32 tolerance on a Zipf batch whose most frequent token holds 2129 of
8192 positions, where versions 1 and 7 (atomics in arbitrary order) exceed it.

Widths that are not a multiple of 8 take the same kernel with one channel a unit (no prefetch).
A block owns at most 512 positions (UB limits its units when C is tiny), so the table fits in
shared memory at every size with B <= 256.
"""
block_sizes = [128, 256, 384]
preconditions = ["B <= 256"]  # a block's positions (B x its time steps) must fit its 512-position table

[derived]
CU = "C // 8 if C % 8 == 0 else C"                    # units a time step has: 8 channels, or 1
UB = "min(block_size, CU * max(1, 512 // B - 1))"     # units a block owns: at most 512 positions
PB = "B * min(T, (UB - 1) // CU + 2)"                 # the positions those units touch, at most
HS = "2 ** (ilog2(2 * PB - 1) + 1)"                   # hash slots: a power of two >= 2 * PB
# partial sums of long groups (max(1, warps / 8) x 8 slices x 256 floats), then the table (key,
# count, lead, 8 positions a slot), 2 x PB + 1 ints of position lists and a 4096-bit filter.
shared_bytes = "8192 * max(1, block_size // 256) + 4 * (11 * HS + 2 * PB + 1 + 128)"

[[launch]]
kernel = "encoder_backward8_pack8"
when = "C % 8 == 0"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)"]

[[launch]]
kernel = "encoder_backward8_scalar"
when = "C % 8 != 0"
grid = "cdiv(T * CU, UB)"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "UB", "PB", "ilog2(HS)"]
*/
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

// ---- end bf16.cuh ----                   // bf16, Pack8 (eight bf16 in 16 bytes) with load8/store8, to_float/to_bf16
// ---- begin encoder_backward_fast.cuh ----
// encoder_backward_fast.cuh: encoder_backward in one pass over dout, without atomics and without
// scratch (version 8, bf16; written for any element type, so an fp32 twin is a Row away). A
// thread owns (t, VEC channels) and walks b: it sums dwpe's B rows in registers, and adds each
// dout row to its token's dwte row itself, after its block has learnt, from one scan of all the
// token ids, which of its positions hold a token that no other position holds (most of them).
// Version 8's header tells the whole story and the numbers.
//
// The formula (the order of every float addition, set by the data alone: no block size, SM
// count or schedule enters it, so the bits are the same on every run):
//   dwpe[t] = dwpe[t] + (((0 + dout[0, t]) + dout[1, t]) + ... + dout[B-1, t])
//   dwte[v] = dwte[v] + total(v), for every token v that occurs, where, with v's k positions:
//     k <= SHORT_MAX: total = ((0 + row[p1]) + row[p2]) + ... , p1 < p2 < ... ascending;
//     k >  SHORT_MAX: the positions split into SLICES fixed ranges [r*N/S, (r+1)*N/S); each
//                     range's rows summed from 0 in ascending order (part_r); total = ((0 +
//                     part_0) + part_1) + ... + part_{S-1}.
//   All sums in fp32; each result is rounded to Elem once, when it is stored.
//
// How a block learns k: its positions' tokens go into a hash table in shared memory (and a
// 4096-bit filter of them); it reads all N ids and probes the few that pass the filter,
// counting each hit against its token, keeping its first SHORT_MAX positions and the minimum
// of mix(n) (a bijection of the 32-bit position). Meanwhile the thread's dout loads are in flight
// and its tokens' dwte rows are being prefetched to L2 (sm_90's bulk prefetch).
//
// Who does it: the position of v whose mix(n) is smallest is v's leader. For k <= SHORT_MAX, the
// thread owning (leader's t, channels) sums the k rows (loaded again: L2 hits, mostly) and
// updates dwte; the threads of the other positions leave dwte alone. For k > SHORT_MAX, the
// block(s) owning the leader's channels do it after their own work: a warp per (32 chunks of VEC
// channels, slice), partials in shared memory, added in order. Every (dwte row, channel) and
// (dwpe row, channel) has exactly one writer in the grid.
//
// Row<Elem, VEC> (the version's, declared here, as in token_partition.cuh): VEC consecutive
// Elem of a row in one access.
//   load(const Elem* p)                            loads p[0, VEC)
//   add_to(float (&acc)[VEC])                      acc[e] += the value e, widened to float
//   store_plus(Elem* p, const float (&sum)[VEC])   p[e] = value e (as loaded) + sum[e], rounded
//
// Launch (the version's header computes these; all must match):
//   units a row: CU = C / VEC; a block owns the units [blockIdx.x * UB, + UB) of the T * CU
//   units (t, chunk) in row-major order (UB <= blockDim.x; threads past UB only help with the
//   block's shared work), so it touches at most PB = B * min(T, (UB - 1) / CU + 2) positions;
//   the hash table has 2^bits >= 2 * PB slots.
//   Dynamic shared memory, in this order: partial float[max(1, warps / SLICES) * SLICES * 32 *
//   VEC_MAX], then key, cnt, lead int[2^bits] each, list int[2^bits * SHORT_MAX], own int[PB],
//   longs int[PB], nlong int[1], filter unsigned[FILTER_WORDS]: 4 * max(1, warps / 8) * 256 *
//   VEC_MAX + 4 * (11 * 2^bits + 2 * PB + 1 + 128) bytes.
//
// encoder_backward_fast<VEC, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits)
//   The whole op, one kernel. Every thread of the block must call it (barriers inside).

#ifndef KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH
#define KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH

namespace ebfast {

constexpr int SHORT_MAX = 8;  // groups of up to 8 positions: the leader's thread sums them
constexpr int SLICES = 8;     // a longer group: 8 fixed position ranges, summed apart, then in order
constexpr int BGROUP = 8;     // b values whose dout chunks a thread holds at once (B = 8: all of them)
constexpr int WGROUP = 4;     // dwte chunks it loads at once
constexpr int EMPTY = -1;     // a free hash slot (never a valid token)
constexpr int FILTER_WORDS = 128;  // a 4096-bit filter of the block's tokens: most ids stop there
constexpr unsigned FULL = 0xffffffffu;

template <typename Elem, int VEC> struct Row;

template <int VEC>
__device__ __forceinline__ void zero(float (&acc)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = 0.0f;
}

// A bijection of 32-bit integers with well-spread outputs: the leader of a token is the position
// with the smallest mix, so the leaders of frequent tokens (whose first positions crowd the start
// of every sequence) land on blocks all over the grid, not on the first ones.
__device__ __forceinline__ unsigned mix(unsigned x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// Asks L2 to fetch [p, p + bytes) from DRAM (p and bytes multiples of 16) and returns at once:
// sm_90's bulk prefetch (the TMA unit does it; no register waits for it). Only a hint: on other
// GPUs, nothing. With per-thread addresses the compiler issues one per distinct address of the
// warp, in a loop: a few dozen a block here. The range must lie inside a buffer: the CPU
// emulator's tests check it through EMU_CHECK_PREFETCH when they define it.
__device__ __forceinline__ void prefetch_l2(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
#elif defined(EMU_CHECK_PREFETCH)
    EMU_CHECK_PREFETCH(p, bytes);
#endif
}

// Fibonacci hashing: the top `bits` bits of v times 2^32 / golden ratio.
__device__ __forceinline__ int slot_of(int v, int bits) { return (int)(((unsigned)v * 2654435761u) >> (32 - bits)); }
// The filter's bit for v: 12 bits of another multiplicative hash.
__device__ __forceinline__ unsigned filter_bit(int v) { return ((unsigned)v * 0x9e3779b9u + 0x7f4a7c15u) >> 20; }

struct Smem {
    float* partial;   // long groups: a warp's fp32 partial sums, per (pair, slice)
    int* key;         // the token in each slot (EMPTY: free)
    int* cnt;         // its positions in all of inp
    unsigned* lead;   // the smallest mix(n) of those positions
    int* list;        // its first SHORT_MAX positions (in scan order; sorted before use)
    int* own;         // the slot of each of the block's positions (-1: an invalid token)
    int* longs;       // the block's positions that lead a long group
    int* nlong;       // how many
    unsigned* filter; // bit f(v) set for each of the block's tokens v
    int mask, bits;
};

template <int VEC_MAX>
__device__ __forceinline__ Smem carve(float4* shared4, int warps, int bits, int PB) {
    Smem s;
    int slots = 1 << bits;
    s.partial = reinterpret_cast<float*>(shared4);
    s.key = reinterpret_cast<int*>(s.partial + max(1, warps / SLICES) * SLICES * 32 * VEC_MAX);
    s.cnt = s.key + slots;
    s.lead = reinterpret_cast<unsigned*>(s.cnt + slots);
    s.list = reinterpret_cast<int*>(s.lead + slots);
    s.own = s.list + slots * SHORT_MAX;
    s.longs = s.own + PB;
    s.nlong = s.longs + PB;
    s.filter = reinterpret_cast<unsigned*>(s.nlong + 1);
    s.mask = slots - 1;
    s.bits = bits;
    return s;
}

// Position n holds token v: if v is one of the block's tokens, count n in its slot.
__device__ __forceinline__ void probe(int v, int n, int V, const Smem& s) {
    if ((unsigned)v >= (unsigned)V) return;
    int h = slot_of(v, s.bits);
    for (;;) {  // load factor <= 1/2: almost always the first slot is v's or free
        int k = s.key[h];
        if (k == v) break;
        if (k == EMPTY) return;
        h = (h + 1) & s.mask;
    }
    int at = atomicAdd(s.cnt + h, 1);
    if (at < SHORT_MAX) s.list[h * SHORT_MAX + at] = n;
    atomicMin(s.lead + h, mix((unsigned)n));
}

// 1 if v may be one of the block's tokens: its filter bit is set (at most 512 tokens in 4096 bits;
// ~40 at the default sizes: 1% of other ids pass). One shared load, no branch.
__device__ __forceinline__ unsigned passes(int v, const Smem& s) {
    unsigned f = filter_bit(v);
    return s.filter[f >> 5] >> (f & 31) & 1u;
}

// Every id of inp, four to a 16-byte load and four loads in flight a thread: filtered, and the
// few that pass probed.
__device__ void scan_ids(const int* inp, int N, int V, const Smem& s) {
    int bs = blockDim.x;
    int nq = (reinterpret_cast<size_t>(inp) & 15) == 0 ? N / 4 : 0;
    const int4* q = reinterpret_cast<const int4*>(inp);
    for (int i0 = threadIdx.x; i0 < nq; i0 += 4 * bs) {
        int4 x[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            x[r] = {EMPTY, EMPTY, EMPTY, EMPTY};  // defined on every path: see Row's note in version 8
            if (i0 + r * bs < nq) x[r] = __ldg(q + i0 + r * bs);
        }
#pragma unroll
        for (int r = 0; r < 4; r++) {
            int i = i0 + r * bs;
            int v[4] = {x[r].x, x[r].y, x[r].z, x[r].w};
            unsigned maybe = 0;  // bit e: v[e] passes the filter (a miss almost always fails it)
#pragma unroll
            for (int e = 0; e < 4; e++) maybe |= passes(v[e], s) << e;
            if (i < nq && maybe) {
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (maybe >> e & 1) probe(v[e], 4 * i + e, V, s);
            }
        }
    }
    for (int n = 4 * nq + threadIdx.x; n < N; n += bs) {
        int v = __ldg(inp + n);
        if (passes(v, s)) probe(v, n, V, s);
    }
}

// acc += the rows of the positions in [lo, hi) holding token v, in ascending order, at channels
// c..c+VEC (lanes with ok false only vote). The warp reads 128 ids a round (coalesced), ballots
// the matches and loads their rows four at a time.
template <int VEC, typename Elem>
__device__ void slice_sum(float (&acc)[VEC], const int* inp, const Elem* dout, int v, int lo, int hi,
                          int C, int c, bool ok) {
    constexpr int U = 4;
    int lane = threadIdx.x % 32;
    for (int w0 = lo; w0 < hi; w0 += 32 * U) {
        int id[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            int pos = w0 + u * 32 + lane;
            id[u] = pos < hi ? __ldg(inp + pos) : EMPTY;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            unsigned m = __ballot_sync(FULL, id[u] == v);
            while (m) {  // the same m in every lane: warp-uniform
                int pos[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    pos[e] = -1;
                    if (m) {
                        pos[e] = w0 + u * 32 + __ffs(m) - 1;
                        m &= m - 1;
                    }
                }
                Row<Elem, VEC> x[4];
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (ok && pos[e] >= 0) x[e].load(dout + pos[e] * C + c);
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (ok && pos[e] >= 0) x[e].add_to(acc);
            }
        }
    }
}

// The block's long groups (k > SHORT_MAX) whose leader it holds: for each, the chunks of the
// leader's row this block owns, 32 chunks (one a lane) x SLICES slices a round of pairs.
template <int VEC, int VEC_MAX, typename Elem>
__device__ void long_groups(Elem* dwte, const Elem* dout, const int* inp, int N, int C, int CU, int u0,
                            int u1, int ta, int span, const Smem& s) {
    constexpr int CW = 32 * VEC;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int pairs = max(1, warps / SLICES);  // (leader, 32 chunks) pairs whose partials fit at once
    int L = *s.nlong;
    for (int l = 0; l < L; l++) {
        int p = s.longs[l];
        int t = ta + p % span;
        int v = s.key[s.own[p]];
        int ca = max(0, u0 - t * CU), cb = min(CU, u1 - t * CU);  // this block's chunks of row t
        int ng = (cb - ca + 31) / 32;
        Elem* row = dwte + v * C;  // V * C < 2^31 (family precondition)
        for (int g0 = 0; g0 < ng; g0 += pairs) {
            int np = min(pairs, ng - g0);
            for (int task = warp; task < np * SLICES; task += warps) {
                int pair = task / SLICES, r = task % SLICES;
                int chunk = ca + (g0 + pair) * 32 + lane;
                int lo = (int)((long long)r * N / SLICES), hi = (int)((long long)(r + 1) * N / SLICES);
                float acc[VEC];
                zero<VEC>(acc);
                slice_sum<VEC>(acc, inp, dout, v, lo, hi, C, chunk * VEC, chunk < cb);
                float* part = s.partial + task * CW + lane * VEC;
#pragma unroll
                for (int e = 0; e < VEC; e++) part[e] = acc[e];
            }
            __syncthreads();
            for (int q = warp; q < np; q += warps) {
                int chunk = ca + (g0 + q) * 32 + lane;
                if (chunk < cb) {
                    float tot[VEC];
                    zero<VEC>(tot);
                    for (int r = 0; r < SLICES; r++) {
                        const float* part = s.partial + (q * SLICES + r) * CW + lane * VEC;
#pragma unroll
                        for (int e = 0; e < VEC; e++) tot[e] += part[e];
                    }
                    Row<Elem, VEC> w;
                    w.load(row + chunk * VEC);
                    w.store_plus(row + chunk * VEC, tot);
                }
            }
            __syncthreads();  // the next round reuses the partials
        }
    }
}

// B > 8 only: the block's dout and dwte chunks of the positions with b in [b0, b0 + BGROUP), to
// L2, one group ahead of their loads (nothing when b0 >= B).
template <int VEC, typename Elem>
__device__ __forceinline__ void prefetch_group(const Elem* dwte, const Elem* dout, int b0, int B, int T,
                                               int C, int CU, int u0, int u1, int ta, int span,
                                               const Smem& s) {
    if constexpr (VEC * sizeof(Elem) % 16 == 0) {
        for (int q = threadIdx.x; q < min(BGROUP, B - b0) * span; q += blockDim.x) {
            int b = b0 + q / span, tp = ta + q % span;
            int ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
            unsigned bytes = (unsigned)((cb - ca) * VEC * sizeof(Elem));
            prefetch_l2(dout + (b * T + tp) * C + ca * VEC, bytes);
            int h = s.own[b * span + tp - ta];
            if (h >= 0) prefetch_l2(dwte + s.key[h] * C + ca * VEC, bytes);
        }
    }
}

// The positions (b0 + j, t), j < BGROUP, b0 + j < B, whose dout chunks (channels c..c+VEC) are
// in d: acc (dwpe's sum) += each, in order of b. Then each position that leads its token's group
// of at most SHORT_MAX adds the group's rows, in ascending position order, to its dwte chunk and
// rounds once. That second part reads the rows again (L2 hits: this thread loaded its own a
// moment ago) rather than keep d: eight dout and eight dwte chunks held at once took ptxas past
// 120 registers. WGROUP positions at a time, their dwte chunk and first row all in flight.
template <int VEC, typename Elem>
__device__ __forceinline__ void positions(const Row<Elem, VEC> (&d)[BGROUP], int b0, float (&acc)[VEC],
                                          Elem* dwte, const Elem* dout, int B, int T, int C, int t,
                                          int c, int ta, int span, bool active, const Smem& s) {
    if (!active) return;
#pragma unroll
    for (int j = 0; j < BGROUP; j++)
        if (b0 + j < B) d[j].add_to(acc);  // dwpe: in order of b
    unsigned leads = 0;  // bit j: this thread updates the dwte chunk of position (b0 + j, t)
#pragma unroll
    for (int j = 0; j < BGROUP; j++) {
        if (b0 + j < B) {
            int h = s.own[(b0 + j) * span + t - ta];
            if (h >= 0 && s.cnt[h] <= SHORT_MAX && s.lead[h] == mix((unsigned)((b0 + j) * T + t)))
                leads |= 1u << j;
        }
    }
#pragma unroll 1  // unrolled, the compiler hoists the next round's loads too: 16 chunks held
    for (int j0 = 0; j0 < BGROUP && (leads >> j0); j0 += WGROUP) {
        Row<Elem, VEC> w[WGROUP], x[WGROUP];
        int slot[WGROUP];
#pragma unroll
        for (int j = 0; j < WGROUP; j++) {
            slot[j] = leads >> (j0 + j) & 1 ? s.own[(b0 + j0 + j) * span + t - ta] : -1;
            if (slot[j] >= 0) {
                w[j].load(dwte + s.key[slot[j]] * C + c);
                x[j].load(dout + s.list[slot[j] * SHORT_MAX] * C + c);  // the group's first row
            }
        }
#pragma unroll
        for (int j = 0; j < WGROUP; j++) {
            int h = slot[j];
            if (h < 0) continue;
            float tot[VEC];
            zero<VEC>(tot);
            x[j].add_to(tot);
#pragma unroll 1
            for (int i = 1, k = s.cnt[h]; i < k; i++) {  // ascending positions (rare: k > 1)
                Row<Elem, VEC> y;
                y.load(dout + s.list[h * SHORT_MAX + i] * C + c);
                y.add_to(tot);
            }
            w[j].store_plus(dwte + s.key[h] * C + c, tot);
        }
    }
}

template <int VEC, int VEC_MAX, typename Elem>
__device__ void encoder_backward_fast(float4* shared4, Elem* dwte, Elem* dwpe, const Elem* dout,
                                      const int* inp, int B, int T, int C, int V, int UB, int PB, int bits) {
    const int CU = C / VEC, N = B * T, bs = blockDim.x, tid = threadIdx.x;
    const int u0 = blockIdx.x * UB, u1 = min(u0 + UB, T * CU);
    const int ta = u0 / CU, span = (u1 - 1) / CU - ta + 1, P = B * span;  // P <= PB
    const int u = u0 + tid;
    const bool active = tid < UB && u < u1;
    const int t = active ? u / CU : ta, c = active ? (u % CU) * VEC : 0;

    // 1. This thread's loads that need nothing from the scan: the dout chunks of its first BGROUP
    //    positions, in flight from DRAM while the block scans the ids (from L2). Its dwpe chunk
    //    is only asked of L2 (held in registers from here, it would be spilled at 80).
    // The block's own token ids (the table's keys) go out first: they start its critical path.
    const int my_id = tid < P ? __ldg(inp + (tid / span) * T + ta + tid % span) : EMPTY;
    Row<Elem, VEC> d[BGROUP];
    if (active) {
#pragma unroll
        for (int j = 0; j < BGROUP; j++)
            if (j < B) d[j].load(dout + (j * T + t) * C + c);  // N * C < 2^31 (family precondition)
    }
    if constexpr (VEC * sizeof(Elem) % 16 == 0) {
        if (tid < span) {  // the block's chunks of dwpe's rows ta .. ta + span - 1
            int tp = ta + tid, ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
            prefetch_l2(dwpe + tp * C + ca * VEC, (unsigned)((cb - ca) * VEC * sizeof(Elem)));
        }
    }

    // 2. The hash table of the block's own tokens (B x span positions).
    Smem s = carve<VEC_MAX>(shared4, bs / 32, bits, PB);
    for (int i = tid; i <= s.mask; i += bs) {
        s.key[i] = EMPTY;
        s.cnt[i] = 0;
        s.lead[i] = 0xffffffffu;
    }
    if (tid == 0) *s.nlong = 0;
    for (int i = tid; i < FILTER_WORDS; i += bs) s.filter[i] = 0u;
    __syncthreads();
    for (int p = tid; p < P; p += bs) {
        int v = p == tid ? my_id : __ldg(inp + (p / span) * T + ta + p % span), h = -1;
        if ((unsigned)v < (unsigned)V) {
            h = slot_of(v, bits);
            for (;;) {  // 2^bits >= 2 * P slots: a free one is always found
                int old = atomicCAS(s.key + h, EMPTY, v);
                if (old == EMPTY || old == v) break;
                h = (h + 1) & s.mask;
            }
            unsigned f = filter_bit(v);
            atomicOr(s.filter + (f >> 5), 1u << (f & 31));
            // The block's chunks of this token's dwte row, on their way to L2 during the scan
            // (the load that needs them comes after it). Also for positions that will turn out
            // not to lead their token (8% of them on uniform tokens): a little wasted DRAM.
            // The first BGROUP b only: later groups are prefetched one group ahead (below), so
            // that a large batch does not ask L2 to hold more than it can.
            if constexpr (VEC * sizeof(Elem) % 16 == 0) {
                int tp = ta + p % span, ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
                if (p / span < BGROUP)
                    prefetch_l2(dwte + v * C + ca * VEC, (unsigned)((cb - ca) * VEC * sizeof(Elem)));
            }
        }
        s.own[p] = h;
    }
    __syncthreads();

    // 3. Every position of inp counted against the table: each own token's count, leader and
    //    (up to SHORT_MAX) positions.
    scan_ids(inp, N, V, s);
    __syncthreads();

    // 4. Short lists in ascending order (they were filled in scan order); the long groups' leaders.
    for (int i = tid; i <= s.mask; i += bs) {
        int k = s.cnt[i];
        if (k >= 2 && k <= SHORT_MAX) {
            int* a = s.list + i * SHORT_MAX;
            for (int x = 1; x < k; x++) {
                int y = a[x], z = x;
                for (; z > 0 && a[z - 1] > y; z--) a[z] = a[z - 1];
                a[z] = y;
            }
        }
    }
    for (int p = tid; p < P; p += bs) {
        int h = s.own[p];
        if (h >= 0 && s.cnt[h] > SHORT_MAX && s.lead[h] == mix((unsigned)((p / span) * T + ta + p % span)))
            s.longs[atomicAdd(s.nlong, 1)] = p;  // the order of this list moves no float
    }
    __syncthreads();

    // 5. The thread's positions, BGROUP at a time: dwpe's sum, then dwte for the tokens it leads.
    float acc[VEC];
    zero<VEC>(acc);
    prefetch_group<VEC>(dwte, dout, BGROUP, B, T, C, CU, u0, u1, ta, span, s);
    positions<VEC>(d, 0, acc, dwte, dout, B, T, C, t, c, ta, span, active, s);
    for (int b0 = BGROUP; b0 < B; b0 += BGROUP) {  // B > 8: the next group's dout chunks
        prefetch_group<VEC>(dwte, dout, b0 + BGROUP, B, T, C, CU, u0, u1, ta, span, s);
        Row<Elem, VEC> e[BGROUP];
        if (active) {
#pragma unroll
            for (int j = 0; j < BGROUP; j++)
                if (b0 + j < B) e[j].load(dout + ((b0 + j) * T + t) * C + c);
        }
        positions<VEC>(e, b0, acc, dwte, dout, B, T, C, t, c, ta, span, active, s);
    }
    if (active) {
        Row<Elem, VEC> pe;
        pe.load(dwpe + t * C + c);
        pe.store_plus(dwpe + t * C + c, acc);
    }

    // 6. Long groups led from here (none at all in most blocks on uniform tokens).
    long_groups<VEC, VEC_MAX>(dwte, dout, inp, N, C, CU, u0, u1, ta, span, s);
}

}  // namespace ebfast

#endif  // KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH

// ---- end encoder_backward_fast.cuh ----  // the one-pass kernel, its table, scan and fixed-order sums

constexpr int VEC_MAX = 8;  // the widest chunk (a Pack8): the header's shared_bytes relies on it

// ---- bf16 rows: VEC consecutive values in one access (8: a Pack8; 1: one bf16), widened. ----
namespace ebfast {
template <> struct Row<bf16, 8> {
    // Held as four 32-bit words, two bf16 each, widened only when added: a thread holds 12 of
    // these at once (8 dout chunks, 4 dwte chunks), and eight bf16 kept one a register would
    // double their registers. Zeroed when declared: the kernels load rows under conditions the
    // compiler cannot follow (active threads, b < B), and a register that may be read before it
    // is written stays allocated from the kernel's first instruction (ptxas counted 30 more).
    int4 q = {0, 0, 0, 0};
    __device__ __forceinline__ void load(const bf16* p) { q = *reinterpret_cast<const int4*>(p); }
    // bf16 is the top half of a float: widening is a shift or a mask of its word.
    __device__ __forceinline__ static float lo(int w) { return __int_as_float(w << 16); }
    __device__ __forceinline__ static float hi(int w) { return __int_as_float(w & (int)0xffff0000u); }
    __device__ __forceinline__ void add_to(float (&acc)[8]) const {
        acc[0] += lo(q.x);
        acc[1] += hi(q.x);
        acc[2] += lo(q.y);
        acc[3] += hi(q.y);
        acc[4] += lo(q.z);
        acc[5] += hi(q.z);
        acc[6] += lo(q.w);
        acc[7] += hi(q.w);
    }
    // p[0..8) = these values widened + sum, rounded once.
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[8]) const {
        Pack8 out;
        out.v[0] = to_bf16(lo(q.x) + sum[0]);
        out.v[1] = to_bf16(hi(q.x) + sum[1]);
        out.v[2] = to_bf16(lo(q.y) + sum[2]);
        out.v[3] = to_bf16(hi(q.y) + sum[3]);
        out.v[4] = to_bf16(lo(q.z) + sum[4]);
        out.v[5] = to_bf16(hi(q.z) + sum[5]);
        out.v[6] = to_bf16(lo(q.w) + sum[6]);
        out.v[7] = to_bf16(hi(q.w) + sum[7]);
        store8(p, out);
    }
};
template <> struct Row<bf16, 1> {
    bf16 x = to_bf16(0.0f);
    __device__ __forceinline__ void load(const bf16* p) { x = *p; }
    __device__ __forceinline__ void add_to(float (&acc)[1]) const { acc[0] += to_float(x); }
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[1]) const {
        p[0] = to_bf16(to_float(x) + sum[0]);
    }
};
}  // namespace ebfast

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward8_pack8(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C,
                        int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];  // the layout in encoder_backward_fast.cuh
    ebfast::encoder_backward_fast<8, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}

extern "C" __global__ void __launch_bounds__(384, 2)
encoder_backward8_scalar(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T, int C,
                         int V, int UB, int PB, int bits) {
    extern __shared__ float4 shared4[];  // the layout in encoder_backward_fast.cuh
    ebfast::encoder_backward_fast<1, VEC_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, UB, PB, bits);
}
