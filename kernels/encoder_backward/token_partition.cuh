// token_partition.cuh: encoder_backward's one-launch token partition (versions 5, fp32, and 6,
// bf16): the scan of the token ids, the per-block position lists, the stable counting sort in
// shared memory, the windows and streamed tokens for positions that do not fit, and the fixed-order
// sums (a token's rows dealt to 8 interleaved fp32 running sums, added in order; dwpe summed over b
// in order). Version 5's header tells the whole story.
//
// Shared because the two versions differ only in the element type of dout, dwte and dwpe and in
// how a row of it is loaded, widened and stored: every sum, and every integer step, is the same.
// Each version supplies that part, Row<Elem, VEC>, its sizes CAP and CW_MAX (its launch header's
// shared_bytes rely on them), its extern "C" kernels (their names are in its launch header) and
// the extern __shared__ array they pass in (declared in the version's own file, where the tests'
// emulator, tests/gpu_emu, looks for it).
//
// Row<Elem, VEC> (the version's, declared here): VEC consecutive Elem of a row in one access.
//   load(const Elem* p)                            loads p[0, VEC)
//   add_to(float (&acc)[VEC])                      acc[e] += the value e, widened to float
//   store_plus(Elem* p, const float (&sum)[VEC])   p[e] = value e (as loaded) + sum[e]: a gradient
//                                                  row loaded early, added to once, stored
//
// Template sizes: CAP, the positions a block holds at once (a multiple of 8, below 2048: the plan
// packs position counts in 11 bits); CW_MAX, the widest warp's channel range (32 * the largest
// VEC a version launches). SLOTS = 256 token ids a block owns at most (the launch header's G keeps
// V / G <= 256), slot = v / G.
//
// Shared memory, in this order: partial float[max(1, warps/4) * LANES * CW_MAX], then list
// int[CAP], sorted int[CAP], cnt, cur, short_slots, long_slots int[SLOTS] each, votes int[64],
// warp_sums int[32], list_slot u16[CAP]: 14720 bytes after the partials at CAP = 1024.
//
// encoder_backward_token_partition<VEC, CAP, CW_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, shift)
//   The whole op, one kernel. shared4: the launch's dynamic shared memory (the layout above).
//   Blocks 0..G-1 (G = 1 << shift) are the token blocks: block g owns the dwte rows of the tokens
//   v with v % G == g. Blocks G.. sum dwpe's rows over b. VEC channels a lane: C % VEC == 0.
//
// The pieces, in the order they are called:
//   carve<CAP, CW_MAX>(shared4, warps) -> Smem: the layout above, as offsets from two pointers.
//   collect<CAP>(inp, N, V, g, shift, lo, hi, skip, out, out_slot, cnt, votes) -> count
//     Scans inp in order, keeps the positions of the block's tokens in slots [lo, hi), ascending
//     (int4 loads, ballots and popcounts, a word per warp); counts them per slot.
//   plan_groups(s, sa, sb) -> packed totals: each group's start in sorted, short and long groups.
//   sum_window<VEC>(dwte, dout, C, g, shift, sa, sb, m, s): the counting sort of the m positions
//     in list (__match_any_sync ranks), then each group's sum into its dwte row.
//   stream_token<VEC>(...): a token with more than CAP positions, its running sums parked in
//     shared memory while its positions are collected CAP at a time.
//   sum_dwpe<VEC>(dwpe, dout, B, T, C, G): the blocks after the token blocks.
// collect, plan_groups, sum_window and stream_token must be called by every thread of the block
// (barriers inside). The sums' order is set by the data alone: no block size, SM count or CAP
// enters it.

#ifndef KERNELS_COMMON_TOKEN_PARTITION_CUH
#define KERNELS_COMMON_TOKEN_PARTITION_CUH

constexpr int SLOTS = 256;   // token ids a block owns at most (G >= V / 256): slot = v / G
constexpr int LANES = 8;     // a token's rows go to 8 interleaved fp32 running sums
constexpr int SHORT = LANES; // groups of at most 8 rows: one warp sums them straight through
constexpr unsigned FULL = 0xffffffffu;

// A row's VEC consecutive values of type Elem: each version specializes it (see above).
template <typename Elem, int VEC> struct Row;

template <int VEC>
__device__ __forceinline__ void zero(float (&acc)[VEC]) {
#pragma unroll
    for (int e = 0; e < VEC; e++) acc[e] = 0.0f;
}

// Shared fp32 partial rows: VEC floats at p, as VEC / 4 float4 (p 16-byte aligned) or one float.
template <int VEC>
__device__ __forceinline__ void load_partial(float (&acc)[VEC], const float* p) {
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int h = 0; h < VEC / 4; h++) {
            float4 a = reinterpret_cast<const float4*>(p)[h];
            acc[4 * h] = a.x;
            acc[4 * h + 1] = a.y;
            acc[4 * h + 2] = a.z;
            acc[4 * h + 3] = a.w;
        }
    } else {
        static_assert(VEC == 1, "VEC: 1 or a multiple of 4");
        acc[0] = p[0];
    }
}
template <int VEC>
__device__ __forceinline__ void store_partial(float* p, const float (&acc)[VEC]) {
    if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int h = 0; h < VEC / 4; h++)
            reinterpret_cast<float4*>(p)[h] = make_float4(acc[4 * h], acc[4 * h + 1], acc[4 * h + 2], acc[4 * h + 3]);
    } else {
        static_assert(VEC == 1, "VEC: 1 or a multiple of 4");
        p[0] = acc[0];
    }
}

// acc += the dout rows rows[r], rows[r + 8], rows[r + 16]... (those below k), channels
// [c, c + VEC), in that order: one of a token's 8 running sums. Four loads in flight at once.
template <int VEC, typename Elem>
__device__ __forceinline__ void add_lane(float (&acc)[VEC], const Elem* dout, const int* rows,
                                         int k, int r, int C, int c) {
    int j = r;
    for (; j + 3 * LANES < k; j += 4 * LANES) {
        Row<Elem, VEC> x[4];
#pragma unroll
        for (int u = 0; u < 4; u++) x[u].load(dout + (size_t)rows[j + u * LANES] * C + c);
#pragma unroll
        for (int u = 0; u < 4; u++) x[u].add_to(acc);
    }
    for (; j < k; j += LANES) {
        Row<Elem, VEC> x;
        x.load(dout + (size_t)rows[j] * C + c);
        x.add_to(acc);
    }
}

// dst += sum of the 8 fp32 partial rows part[0], part[CW], ..., part[7 * CW], added in that order.
template <int VEC, typename Elem>
__device__ __forceinline__ void finish(Elem* dst, const float* part, int CW) {
    Row<Elem, VEC> d;
    d.load(dst);  // in flight while the partials are added
    float total[VEC];
    zero<VEC>(total);
#pragma unroll 2
    for (int r = 0; r < LANES; r++) {  // not all 8 loads at once: 8 x VEC registers
        float x[VEC];
        load_partial<VEC>(x, part + r * CW);
#pragma unroll
        for (int e = 0; e < VEC; e++) total[e] += x[e];
    }
    d.store_plus(dst, total);
}

// ---- The shared-memory plan of a token block (offsets from two pointers: few registers). ----
template <int CAP, int CW_MAX>
struct Smem {
    static_assert(CAP % LANES == 0 && CAP < 2048, "CAP: a multiple of 8, below 2048 (plan_groups)");
    float* partial;  // max(1, warps / 4) * LANES * CW_MAX floats
    int* base;       // the rest
    __device__ int* list() const { return base; }                 // kept positions, ascending
    __device__ int* sorted() const { return base + CAP; }         // the same, grouped by token
    __device__ int* cnt() const { return base + 2 * CAP; }        // positions per owned token (slot)
    __device__ int* cur() const { return base + 2 * CAP + SLOTS; }  // a group's start, then its end
    __device__ int* short_slots() const { return base + 2 * CAP + 2 * SLOTS; }  // groups of 1..8 rows
    __device__ int* long_slots() const { return base + 2 * CAP + 3 * SLOTS; }   // groups of more
    __device__ int* votes() const { return base + 2 * CAP + 4 * SLOTS; }        // 2 x a count per warp
    __device__ int* warp_sums() const { return base + 2 * CAP + 4 * SLOTS + 64; }
    __device__ unsigned short* list_slot() const {
        return reinterpret_cast<unsigned short*>(base + 2 * CAP + 4 * SLOTS + 96);
    }
};

template <int CAP, int CW_MAX>
__device__ __forceinline__ Smem<CAP, CW_MAX> carve(float4* shared4, int warps) {
    Smem<CAP, CW_MAX> s;
    s.partial = reinterpret_cast<float*>(shared4);
    s.base = reinterpret_cast<int*>(s.partial + max(1, warps / 4) * LANES * CW_MAX);
    return s;
}

// tok = inp[n0 .. n0 + 4), -1 past N: one int4 load when all four are in and inp is aligned.
__device__ __forceinline__ void load_ids(int (&tok)[4], const int* inp, int n0, int N, bool aligned) {
    if (aligned && n0 + 3 < N) {
        int4 q = *reinterpret_cast<const int4*>(inp + n0);
        tok[0] = q.x;
        tok[1] = q.y;
        tok[2] = q.z;
        tok[3] = q.w;
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) tok[e] = n0 + e < N ? inp[n0 + e] : -1;
    }
}

// Scans inp[0, N) in order and keeps the positions n whose token v is valid, v % G == g and
// lo <= v / G < hi. The kept position of rank i (ascending n) is written to out[i - skip] when
// skip <= i < skip + CAP (with its slot to out_slot, if given); cnt (if given) counts every kept
// position per slot. Returns the number kept (with cnt null, it may stop once past skip + CAP).
// Every thread of the block calls it and gets the same result; it ends with a barrier.
template <int CAP>
__device__ int collect(const int* inp, int N, int V, int g, int shift, int lo, int hi, int skip,
                       int* out, unsigned short* out_slot, int* cnt, int* votes) {
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned below = (1u << lane) - 1;
    int mask = (1 << shift) - 1;
    bool aligned = (reinterpret_cast<size_t>(inp) & 15) == 0;
    int total = 0, step = 4 * blockDim.x;
    int next[4];
    load_ids(next, inp, 4 * threadIdx.x, N, aligned);
    for (int base = 0, round = 0; base < N; base += step, round++) {
        int n0 = base + 4 * threadIdx.x;
        int tok[4] = {next[0], next[1], next[2], next[3]};
        if (base + step < N) load_ids(next, inp, n0 + step, N, aligned);  // in flight during this round
        int keep = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int v = tok[e];
            if (v >= 0 && v < V && (v & mask) == g && (v >> shift) >= lo && (v >> shift) < hi)
                keep |= 1 << e;
        }
        // This thread's count (0..4) in three bit planes: the lanes below it hold pre kept ids.
        int count = __popc(keep);
        unsigned b0 = __ballot_sync(FULL, count & 1), b1 = __ballot_sync(FULL, count & 2),
                 b2 = __ballot_sync(FULL, count & 4);
        int pre = __popc(b0 & below) + 2 * __popc(b1 & below) + 4 * __popc(b2 & below);
        int* vote = votes + 32 * (round & 1);  // two rounds' words: one barrier a round
        if (lane == 0) vote[warp] = __popc(b0) + 2 * __popc(b1) + 4 * __popc(b2);
        __syncthreads();
        int before = 0, sum = 0;
        for (int w = 0; w < warps; w++) {
            int x = vote[w];
            before += w < warp ? x : 0;
            sum += x;
        }
        int rank = total + before + pre;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (!(keep >> e & 1)) continue;
            if (rank >= skip && rank - skip < CAP) {
                out[rank - skip] = n0 + e;
                if (out_slot) out_slot[rank - skip] = (unsigned short)(tok[e] >> shift);
            }
            if (cnt) atomicAdd(cnt + (tok[e] >> shift), 1);  // integers: exact in any order
            rank++;
        }
        total += sum;
        if (!cnt && total >= skip + CAP) break;  // the same total in every thread
    }
    __syncthreads();
    return total;
}

// Group plan of the window of slots [sa, sb), whose positions (at most CAP) are in list: an
// exclusive scan of the counts gives each group's start in sorted (cur), and the slots of the
// nonempty groups in order, short (1..8 rows) and long (more) apart. Three counters are
// scanned at once in one int: positions (bits 0-10), short groups (11-19), long groups (20-28).
// Returns the packed totals; ends with a barrier.
template <int CAP, int CW_MAX>
__device__ int plan_groups(const Smem<CAP, CW_MAX>& s, int sa, int sb) {
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int per = (sb - sa + blockDim.x - 1) / blockDim.x;
    int lo = min(sa + (int)threadIdx.x * per, sb), hi = min(lo + per, sb);
    auto packed = [](int k) { return k | (k > 0 && k <= SHORT ? 1 << 11 : 0) | (k > SHORT ? 1 << 20 : 0); };
    int mine = 0;
    for (int slot = lo; slot < hi; slot++) mine += packed(s.cnt()[slot]);
    int incl = mine;
    for (int o = 1; o < 32; o *= 2) {
        int y = __shfl_up_sync(FULL, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) s.warp_sums()[warp] = incl;
    __syncthreads();
    int run = incl - mine, total = 0;
    for (int w = 0; w < warps; w++) {
        int x = s.warp_sums()[w];
        run += w < warp ? x : 0;
        total += x;
    }
    for (int slot = lo; slot < hi; slot++) {
        int k = s.cnt()[slot];
        s.cur()[slot] = run & 0x7ff;
        if (k > SHORT) s.long_slots()[(run >> 20) & 0x1ff] = slot;
        else if (k > 0) s.short_slots()[(run >> 11) & 0x1ff] = slot;
        run += packed(k);
    }
    __syncthreads();
    return total;
}

// The sums of the positions in list (m of them, the window of slots [sa, sb)) into dwte.
template <int VEC, typename Elem, int CAP, int CW_MAX>
__device__ void sum_window(Elem* dwte, const Elem* dout, int C, int g, int shift, int sa, int sb,
                           int m, const Smem<CAP, CW_MAX>& s) {
    constexpr int CW = 32 * VEC;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int chunks = (C + CW - 1) / CW;
    int c_lane = lane * VEC;
    int plan = plan_groups(s, sa, sb);
    int n_short = (plan >> 11) & 0x1ff, n_long = (plan >> 20) & 0x1ff;

    // The stable counting sort: one warp places 32 positions at a time, in list order.
    if (warp == 0) {
        unsigned below = (1u << lane) - 1;
        for (int i0 = 0; i0 < m; i0 += 32) {
            int i = i0 + lane;
            int slot = i < m ? s.list_slot()[i] : SLOTS + lane;  // idle lanes: keys of their own
            unsigned peers = __match_any_sync(FULL, slot);
            int rank = __popc(peers & below);
            int at = i < m ? s.cur()[slot] : 0;
            __syncwarp();
            if (i < m) {
                s.sorted()[at + rank] = s.list()[i];
                if (rank == 0) s.cur()[slot] = at + __popc(peers);
            }
            __syncwarp();
        }
    }
    __syncthreads();  // cur[slot] now ends its group; it starts at cur[slot] - cnt[slot]

    // Groups of 1..8 rows: a warp per (group, 32*VEC channels), its rows summed in order.
    for (int item = warp; item < n_short * chunks; item += warps) {
        int slot = s.short_slots()[item / chunks];
        int c = (item % chunks) * CW + c_lane;
        if (c >= C) continue;
        int k = s.cnt()[slot];
        const int* rows = s.sorted() + s.cur()[slot] - k;
        Elem* dst = dwte + (size_t)((slot << shift) + g) * C + c;
        Row<Elem, VEC> d;
        d.load(dst);  // the gradient row's load in flight with the first rows'
        float acc[VEC];
        zero<VEC>(acc);
        for (int j = 0; j < k; j++) {  // k <= 8: in position order, straight through
            Row<Elem, VEC> x;
            x.load(dout + (size_t)rows[j] * C + c);
            x.add_to(acc);
        }
        d.store_plus(dst, acc);
    }

    // Longer groups: a warp per (group, channels, running sum r), the 8 partial rows of a
    // (group, channels) pair parked in shared memory, then added in order. Rounds of `pairs`.
    int pairs = max(1, warps / 4) * CW_MAX / CW;
    int n_pairs = n_long * chunks;
    for (int p0 = 0; p0 < n_pairs; p0 += pairs) {
        int np = min(pairs, n_pairs - p0);
        for (int item = warp; item < np * LANES; item += warps) {
            int p = p0 + item / LANES;
            int slot = s.long_slots()[p / chunks];
            int c = (p % chunks) * CW + c_lane;
            if (c >= C) continue;
            int k = s.cnt()[slot];
            float acc[VEC];
            zero<VEC>(acc);
            add_lane<VEC>(acc, dout, s.sorted() + s.cur()[slot] - k, k, item % LANES, C, c);
            store_partial<VEC>(s.partial + item * CW + c_lane, acc);
        }
        __syncthreads();
        for (int q = warp; q < np; q += warps) {
            int p = p0 + q;
            int slot = s.long_slots()[p / chunks];
            int c = (p % chunks) * CW + c_lane;
            if (c < C) {
                finish<VEC>(dwte + (size_t)((slot << shift) + g) * C + c,
                            s.partial + q * LANES * CW + c_lane, CW);
            }
        }
        __syncthreads();
    }
    __syncthreads();  // the next window reuses list, sorted and the plan
}

// A token with more than CAP positions (slot `slot`, k of them): its 8 running sums stay in
// shared memory while its positions are collected CAP at a time (CAP is a multiple of 8, so
// position j of a batch is still row j % 8's). `pairs` channel ranges per pass over the ids.
template <int VEC, typename Elem, int CAP, int CW_MAX>
__device__ void stream_token(Elem* dwte, const Elem* dout, const int* inp, int N, int C, int V,
                             int g, int shift, int slot, int k, const Smem<CAP, CW_MAX>& s) {
    constexpr int CW = 32 * VEC;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int chunks = (C + CW - 1) / CW;
    int c_lane = lane * VEC;
    int pairs = max(1, warps / 4) * CW_MAX / CW;
    Elem* row = dwte + (size_t)((slot << shift) + g) * C;
    for (int ch0 = 0; ch0 < chunks; ch0 += pairs) {
        int np = min(pairs, chunks - ch0);
        for (int b0 = 0; b0 < k; b0 += CAP) {
            int kb = min(CAP, k - b0);
            collect<CAP>(inp, N, V, g, shift, slot, slot + 1, b0, s.sorted(), nullptr, nullptr, s.votes());
            for (int item = warp; item < np * LANES; item += warps) {
                int c = (ch0 + item / LANES) * CW + c_lane;
                if (c >= C) continue;
                float* part = s.partial + item * CW + c_lane;
                float acc[VEC];
                if (b0 == 0) zero<VEC>(acc);
                else load_partial<VEC>(acc, part);
                add_lane<VEC>(acc, dout, s.sorted(), kb, item % LANES, C, c);
                store_partial<VEC>(part, acc);
            }
            __syncthreads();
        }
        for (int q = warp; q < np; q += warps) {
            int c = (ch0 + q) * CW + c_lane;
            if (c < C) finish<VEC>(row + c, s.partial + q * LANES * CW + c_lane, CW);
        }
        __syncthreads();
    }
}

// Blocks G..: dwpe row t += sum over b of dout[b, t, :], in order of b; a warp per (t, channels).
template <int VEC, typename Elem>
__device__ void sum_dwpe(Elem* dwpe, const Elem* dout, int B, int T, int C, int G) {
    constexpr int CW = 32 * VEC;
    int warps = blockDim.x / 32, lane = threadIdx.x % 32;
    int chunks = (C + CW - 1) / CW;
    int stride = (gridDim.x - G) * warps;
    for (int item = (blockIdx.x - G) * warps + threadIdx.x / 32; item < T * chunks; item += stride) {
        int t = item / chunks, c = (item % chunks) * CW + lane * VEC;
        if (c >= C) continue;
        Elem* dst = dwpe + (size_t)t * C + c;
        Row<Elem, VEC> d;
        d.load(dst);
        float acc[VEC];
        zero<VEC>(acc);
        int b = 0;
        for (; b + 3 < B; b += 4) {
            Row<Elem, VEC> x[4];
#pragma unroll
            for (int u = 0; u < 4; u++) x[u].load(dout + ((size_t)(b + u) * T + t) * C + c);
#pragma unroll
            for (int u = 0; u < 4; u++) x[u].add_to(acc);
        }
        for (; b < B; b++) {
            Row<Elem, VEC> x;
            x.load(dout + ((size_t)b * T + t) * C + c);
            x.add_to(acc);
        }
        d.store_plus(dst, acc);
    }
}

// Blocks 0..G-1 (G = 1 << shift): block g owns the tokens v with v % G == g, slot v / G.
template <int VEC, int CAP, int CW_MAX, typename Elem>
__device__ void encoder_backward_token_partition(float4* shared4, Elem* dwte, Elem* dwpe,
                                                 const Elem* dout, const int* inp, int B, int T,
                                                 int C, int V, int shift) {
    int G = 1 << shift;
    if ((int)blockIdx.x >= G) {
        sum_dwpe<VEC>(dwpe, dout, B, T, C, G);
        return;
    }
    int N = B * T, g = blockIdx.x;
    int slots = ((V - 1) >> shift) + 1;  // the header's G keeps this <= SLOTS
    Smem<CAP, CW_MAX> s = carve<CAP, CW_MAX>(shared4, blockDim.x / 32);
    for (int i = threadIdx.x; i < SLOTS; i += blockDim.x) s.cnt()[i] = 0;
    __syncthreads();
    int m = collect<CAP>(inp, N, V, g, shift, 0, slots, 0, s.list(), s.list_slot(), s.cnt(), s.votes());
    // Usually every position of the block's tokens is now in list: one window of all its slots.
    // When they do not fit (tiny vocabularies), windows of consecutive slots whose positions
    // fit, each collected by a rescan of the ids; a slot with more than CAP positions alone,
    // streamed. (One loop for both, so that sum_window's code exists once.)
    for (int sa = 0; m > 0 && sa < slots;) {
        int sb = slots, held = m;
        if (m > CAP) {
            int k = s.cnt()[sa];
            if (k > CAP) {
                stream_token<VEC>(dwte, dout, inp, N, C, V, g, shift, sa, k, s);
                sa++;
                continue;
            }
            sb = sa;
            held = 0;
            while (sb < slots && s.cnt()[sb] <= CAP && held + s.cnt()[sb] <= CAP) held += s.cnt()[sb++];
            if (held == 0) {
                sa = sb;
                continue;
            }
            collect<CAP>(inp, N, V, g, shift, sa, sb, 0, s.list(), s.list_slot(), nullptr, s.votes());
        }
        sum_window<VEC>(dwte, dout, C, g, shift, sa, sb, held, s);
        sa = sb;
    }
}

#endif  // KERNELS_COMMON_TOKEN_PARTITION_CUH
