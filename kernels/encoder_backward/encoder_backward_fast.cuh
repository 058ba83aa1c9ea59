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
//   Its last template argument says which requests go through sm_90's bulk copies (the TMA
//   unit) into shared memory: NONE (version 8), DOUT (version 9: the first BGROUP dout row-blocks
//   and the ids) or ROWS (version 11: the ids, then the block's chunks of the dwte rows its first
//   BGROUP row-blocks update and of its dwpe rows, so that the updates after the scan read shared
//   memory; its dout chunks are loaded only after the plan). The order of the sums, and so the
//   bits, are the same in all three.

#ifndef KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH
#define KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH

#include "l2_prefetch.cuh"  // prefetch_l2_range: row ranges asked of L2 (sm_90 bulk prefetch)

namespace ebfast {

constexpr int SHORT_MAX = 8;  // groups of up to 8 positions: the leader's thread sums them
constexpr int SLICES = 8;     // a longer group: 8 fixed position ranges, summed apart, then in order
constexpr int BGROUP = 8;     // b values whose dout chunks a thread holds at once (B = 8: all of them)
constexpr int WGROUP = 4;     // dwte chunks it loads at once
constexpr int EMPTY = -1;     // a free hash slot (never a valid token)
constexpr int FILTER_WORDS = 128;  // a 4096-bit filter of the block's tokens: most ids stop there
constexpr unsigned FULL = 0xffffffffu;
enum Bulk { NONE = 0, DOUT = 1, ROWS = 2 };  // versions 8, 9 and 11: see encoder_backward_fast below

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
// units: where the whole 16-byte units of inp are read from (version 9: a copy in shared memory;
// null: inp itself, through the read-only path).
__device__ void scan_ids(const int* inp, int N, int V, const Smem& s, const int4* units = nullptr) {
    int bs = blockDim.x;
    int nq = (reinterpret_cast<size_t>(inp) & 15) == 0 ? N / 4 : 0;
    const int4* q = reinterpret_cast<const int4*>(inp);
    for (int i0 = threadIdx.x; i0 < nq; i0 += 4 * bs) {
        int4 x[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            x[r] = {EMPTY, EMPTY, EMPTY, EMPTY};  // defined on every path: see Row's note in version 8
            if (i0 + r * bs < nq) x[r] = units ? units[i0 + r * bs] : __ldg(q + i0 + r * bs);
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
            prefetch_l2_range(dout + (b * T + tp) * C + ca * VEC, bytes);
            int h = s.own[b * span + tp - ta];
            if (h >= 0) prefetch_l2_range(dwte + s.key[h] * C + ca * VEC, bytes);
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

// ---- BULK (version 9): the first BGROUP dout rows of the block through the TMA unit ----------
// For each b < BGROUP the block's units [u0, u1) of dout row-block b are one contiguous range
// ((b * T * CU + u0) units of 16 bytes on): one bulk copy each into the tile in shared memory,
// completing on mbarrier b. No thread waits to issue them (a plain load stalls its warp once
// the memory system stops accepting more), and no register holds them until they are used.
// On GPUs before sm_90 (and on the CPU emulator) each thread copies its own chunks instead, so
// the tile's indexing is the same and no barrier is needed (a thread reads only what it wrote).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// One bulk copy of `bytes` (a multiple of 16) from global src to shared dst, completing on bar
// (which this thread's arrival tells how many bytes to wait for). sm_90 only.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    unsigned b = smem_addr(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(b) : "memory");
}

// ROWS: several threads each add the bytes of their own copies to bar's expected count (no
// arrival: the barrier's single arrival comes from thread 0 once every copy has been issued).
__device__ __forceinline__ void bulk_copy_tx(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    unsigned b = smem_addr(bar);
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(b) : "memory");
}
#endif

__device__ __forceinline__ void bulk_arrive(unsigned long long* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}

__device__ __forceinline__ void bulk_init(unsigned long long* bars, int n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        for (int j = 0; j < n; j++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + j)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
#endif
}

// Thread 0 (sm_90) or every active thread (otherwise): tile[j * UB + i] = unit u0 + i of dout's
// row-block j, for j < nb.
__device__ __forceinline__ void bulk_issue(int4* tile, unsigned long long* bars, const int4* dout_units, int nb,
                                           int TCU, int u0, int u1, int UB, bool active) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        for (int j = 0; j < nb; j++)
            bulk_copy(tile + j * UB, dout_units + (size_t)j * TCU + u0, (unsigned)(u1 - u0) * 16u, bars + j);
    }
#else
    if (active)
        for (int j = 0; j < nb; j++) tile[j * UB + threadIdx.x] = dout_units[(size_t)j * TCU + u0 + threadIdx.x];
#endif
}

// The whole 16-byte units of inp (nq of them) into ids: one bulk copy completing on bar (sm_90),
// or a copy by the block's threads (elsewhere: the block's next barrier orders it).
__device__ __forceinline__ void bulk_ids(int4* ids, unsigned long long* bar, const int* inp, int nq) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0 && nq > 0) bulk_copy(ids, inp, (unsigned)nq * 16u, bar);
#else
    for (int i = threadIdx.x; i < nq; i += blockDim.x) ids[i] = reinterpret_cast<const int4*>(inp)[i];
#endif
}

// Waits until row-block j has landed (sm_90; elsewhere the thread's own copy is already there).
__device__ __forceinline__ void bulk_wait(unsigned long long* bars, int j) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned bar = smem_addr(bars + j), done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar) : "memory");
#endif
}

// ROWS: the block's chunks of the dwte rows of its positions with b < BGROUP, each to its
// position's place in the tile (row-block b, the column of the thread owning the unit), and of its
// dwpe rows to row-block BGROUP: one bulk copy per (position, row) range, issued by thread p for
// position p and by thread P + i for dwpe's row ta + i (strided by the block), on bar. Positions with an invalid token
// copy nothing. Before sm_90 each active thread copies its own column (only it reads it).
template <int VEC, typename Elem>
__device__ __forceinline__ void rows_issue(int4* tile, unsigned long long* bar, const Elem* dwte, const Elem* dwpe,
                                           int B, int C, int CU, int u0, int u1, int UB, int ta, int span,
                                           bool active, int t, int c, const Smem& s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int P = min(B, BGROUP) * span;
    for (int i = threadIdx.x; i < P + span; i += blockDim.x) {  // (narrow rows: span can pass blockDim)
        int q = i < P ? i : i - P, tp = ta + q % span;
        int ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
        int col = tp * CU + ca - u0;  // the tile column of the range's first unit
        if (i < P) {
            int h = s.own[i];
            if (h >= 0)
                bulk_copy_tx(tile + (i / span) * UB + col, dwte + s.key[h] * C + ca * VEC, (unsigned)(cb - ca) * 16u, bar);
        } else {
            bulk_copy_tx(tile + BGROUP * UB + col, dwpe + tp * C + ca * VEC, (unsigned)(cb - ca) * 16u, bar);
        }
    }
#else
    if (!active) return;
    for (int j = 0; j < min(B, BGROUP); j++) {
        int h = s.own[j * span + t - ta];
        if (h >= 0) tile[j * UB + threadIdx.x] = *reinterpret_cast<const int4*>(dwte + s.key[h] * C + c);
    }
    tile[BGROUP * UB + threadIdx.x] = *reinterpret_cast<const int4*>(dwpe + t * C + c);
#endif
}

// ROWS: positions() for the first BGROUP row-blocks, with every dwte chunk already in the tile
// (col: this thread's column). A position alone with its token (k = 1) adds its own chunk, still
// in d, so its update loads nothing at all; a leader of k > 1 loads the group's rows in ascending
// order as positions() does. The same sums in the same order: the same bits.
template <int VEC, typename Elem>
__device__ __forceinline__ void positions_tiled(const Row<Elem, VEC> (&d)[BGROUP], float (&acc)[VEC], Elem* dwte,
                                                const Elem* dout, const int4* col, int UB, int B, int T, int C,
                                                int t, int c, int ta, int span, bool active, const Smem& s) {
    if (!active) return;
#pragma unroll
    for (int j = 0; j < BGROUP; j++)
        if (j < B) d[j].add_to(acc);  // dwpe: in order of b
#pragma unroll
    for (int j = 0; j < BGROUP; j++) {
        if (j >= B) continue;
        int h = s.own[j * span + t - ta];
        if (h < 0) continue;
        int k = s.cnt[h];
        if (k > SHORT_MAX || s.lead[h] != mix((unsigned)(j * T + t))) continue;
        float tot[VEC];
        zero<VEC>(tot);
        if (k == 1) {
            d[j].add_to(tot);
        } else {
#pragma unroll 1
            for (int i = 0; i < k; i++) {  // ascending positions (rare: k > 1)
                Row<Elem, VEC> y;
                y.load(dout + s.list[h * SHORT_MAX + i] * C + c);
                y.add_to(tot);
            }
        }
        Row<Elem, VEC> w;
        w.load(reinterpret_cast<const Elem*>(col + j * UB));
        w.store_plus(dwte + s.key[h] * C + c, tot);
    }
}

// BULK: the dynamic shared memory starts with the tile (BGROUP * UB units of 16 bytes for DOUT,
// BGROUP + 1 row-blocks for ROWS), BGROUP + 1 mbarriers (5 more units: the last one is the ids';
// ROWS uses the first for its rows), the ids' units when they are copied (nq), then the layout
// above.
__device__ __forceinline__ int tile_rows(int bulk) { return bulk == ROWS ? BGROUP + 1 : BGROUP; }
__device__ __forceinline__ int bulk_units(int bulk, int UB, int nq) {
    return tile_rows(bulk) * UB + BGROUP / 2 + 1 + nq;
}

// ids_in_smem (DOUT and ROWS only): all of inp's whole units are copied into shared memory at the
// start and scanned there (the launch gives the room: 16 bytes a unit).
template <int VEC, int VEC_MAX, typename Elem, int BULK = NONE>
__device__ void encoder_backward_fast(float4* shared4, Elem* dwte, Elem* dwpe, const Elem* dout,
                                      const int* inp, int B, int T, int C, int V, int UB, int PB, int bits,
                                      bool ids_in_smem = false) {
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
    // DOUT, ROWS: the scan's ids are requested first (copied into shared memory when ids_in_smem,
    // else asked of L2 with one bulk prefetch), so they are not queued in DRAM behind dout. DOUT
    // requests the dout rows only once the own ids are in; ROWS asks for the dwte rows' chunks
    // once the own ids are in and loads the dout chunks only after the plan, just before the
    // updates: DRAM gets the ids, then the rows, then dout, in the order they are needed.
    int4* tile = reinterpret_cast<int4*>(shared4);
    const int trows = tile_rows(BULK);
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(shared4 + trows * UB);
    static_assert(BULK == NONE || VEC * sizeof(Elem) == 16, "DOUT and ROWS move 16-byte units");
    int4* ids = reinterpret_cast<int4*>(shared4 + trows * UB + BGROUP / 2 + 1);
    const int ids_nq = BULK != NONE && ids_in_smem && (reinterpret_cast<size_t>(inp) & 15) == 0 ? N / 4 : 0;
    if constexpr (BULK != NONE) {
        bulk_init(bars, BGROUP + 1);
        if (ids_nq > 0)
            bulk_ids(ids, bars + BGROUP, inp, ids_nq);  // the scan's ids, before any other request
        else if (tid == 0)
            prefetch_l2_ints(inp, N);
        shared4 += bulk_units(BULK, UB, ids_nq);
    }
    const int my_id = tid < P ? __ldg(inp + (tid / span) * T + ta + tid % span) : EMPTY;
    Row<Elem, VEC> d[BGROUP];
    if (BULK == NONE && active) {
#pragma unroll
        for (int j = 0; j < BGROUP; j++)
            if (j < B) d[j].load(dout + (j * T + t) * C + c);  // N * C < 2^31 (family precondition)
    }
    if constexpr (BULK != ROWS && VEC * sizeof(Elem) % 16 == 0) {
        if (tid < span) {  // the block's chunks of dwpe's rows ta .. ta + span - 1
            int tp = ta + tid, ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
            prefetch_l2_range(dwpe + tp * C + ca * VEC, (unsigned)((cb - ca) * VEC * sizeof(Elem)));
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
            if constexpr (BULK != ROWS && VEC * sizeof(Elem) % 16 == 0) {
                int tp = ta + p % span, ca = max(0, u0 - tp * CU), cb = min(CU, u1 - tp * CU);
                if (p / span < BGROUP)
                    prefetch_l2_range(dwte + v * C + ca * VEC, (unsigned)((cb - ca) * VEC * sizeof(Elem)));
            }
        }
        s.own[p] = h;
    }
    __syncthreads();
    if constexpr (BULK == DOUT)  // the own ids are in: now the dout rows (the barrier made the init visible)
        bulk_issue(tile, bars, reinterpret_cast<const int4*>(dout), min(B, BGROUP), T * CU, u0, u1, UB, active);
    if constexpr (BULK == ROWS)  // the own ids are in: now the chunks of their dwte rows, and dwpe's
        rows_issue<VEC>(tile, bars, dwte, dwpe, B, C, CU, u0, u1, UB, ta, span, active, t, c, s);

    // 3. Every position of inp counted against the table: each own token's count, leader and
    //    (up to SHORT_MAX) positions.
    if (ids_nq > 0) bulk_wait(bars, BGROUP);  // (ids_nq is 0 without BULK)
    scan_ids(inp, N, V, s, ids_nq > 0 ? ids : nullptr);
    __syncthreads();
    if (BULK == ROWS && tid == 0) bulk_arrive(bars);  // every copy of the rows has its bytes counted

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
    if constexpr (BULK == DOUT) {
        for (int j = 0; j < min(B, BGROUP); j++) bulk_wait(bars, j);
        if (active) {
#pragma unroll
            for (int j = 0; j < BGROUP; j++)
                if (j < B) d[j].load(reinterpret_cast<const Elem*>(tile + j * UB + tid));
        }
    }
    if constexpr (BULK == ROWS) {
        if (active) {
#pragma unroll
            for (int j = 0; j < BGROUP; j++)
                if (j < B) d[j].load(dout + (j * T + t) * C + c);
        }
        bulk_wait(bars, 0);
        positions_tiled<VEC>(d, acc, dwte, dout, tile + tid, UB, B, T, C, t, c, ta, span, active, s);
    } else {
        positions<VEC>(d, 0, acc, dwte, dout, B, T, C, t, c, ta, span, active, s);
    }
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
        if constexpr (BULK == ROWS)
            pe.load(reinterpret_cast<const Elem*>(tile + BGROUP * UB + tid));
        else
            pe.load(dwpe + t * C + c);
        pe.store_plus(dwpe + t * C + c, acc);
    }

    // 6. Long groups led from here (none at all in most blocks on uniform tokens).
    long_groups<VEC, VEC_MAX>(dwte, dout, inp, N, C, CU, u0, u1, ta, span, s);
}

}  // namespace ebfast

#endif  // KERNELS_COMMON_ENCODER_BACKWARD_FAST_CUH
