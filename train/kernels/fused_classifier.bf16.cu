/*
title = "bf16 logits: version 3's two passes at half the bytes"
precision = "bf16"
changed = "The logits are bf16: the body of each row moves in packs of eight bf16 (16 bytes, one access) from the row's first 16-byte boundary, widened to float for the online (max, sum) pair and the gradient, rounded once to bf16 on the store. The real columns end the vector body (version 4's split), so the padding is written as zeros without being read; the one-hot term is subtracted in the pack that holds the target, and thread 0 reads the target's logit for the loss."
why = """
The first step to bf16, with version 3's structure kept: one block per row, a first pass folding
the row into a (max, sum) pair in float, one block merge, a second pass re-reading the row (from
L2: a 100 KB bf16 row, two per SM at 1024 threads, ~26 MB in flight against a 50 MB L2) and
overwriting it with the gradient. Only storage changes: half the bytes per element, so at the
same bandwidth the kernel should take half version 3's time. The arithmetic stays float (the loss
is computed exactly as at fp32; each dlogit is rounded once, on its store), so per byte there is
twice the work: the pair is folded eight values at a time (nine exps per pack, not sixteen), and
in the second pass the target test is one compare per pack instead of one per element. A row of
GPT-2's 50304 columns starts on a 16-byte boundary; any other Vp gives rows that start anywhere,
so each row takes 0-7 scalar columns up to its boundary, whole packs of real columns, then
scalars: the last 0-7 real columns and the padding, which is written (zeros) and never read.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "fused_classifier5"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]
*/
#include <cfloat>
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

// ---- end bf16.cuh ----            // bf16, to_float
// ---- begin online_softmax.cuh ----
// online_softmax.cuh: the online softmax's running (max, sum) pair, its updates and its merges.
//
// Shared because softmax_forward 7-8 and fused_classifier 1-4 all carried the same copies.
// softmax_forward 6, the version that introduces the pair merge, still writes these out (with the
// same names); later versions include this header.
//
// A pair (m, s) stands for s = sum of exp(x - m) over the values x seen so far. (-FLT_MAX, 0) is
// the empty pair: -FLT_MAX rather than -inf, so that merging two empty pairs computes
// exp(-FLT_MAX - -FLT_MAX) = 1 times a zero sum, where -inf would give exp(inf - inf) = NaN.
// Pairs merge associatively, (m, s) + (m2, s2) = (M, s exp(m - M) + s2 exp(m2 - M)) with
// M = max(m, m2), so threads, warps and blocks may combine theirs in any tree.
//
// online_update(m, s, x), online_update4(m, s, v)
//   Fold one value, or a float4 (one rescale for the four), into a thread's running pair.
// online_merge(m, s, m2, s2)
//   (m, s) <- (m, s) + (m2, s2).
// warp_online_merge(m, s)
//   Xor butterfly over the warp: every lane gets the warp's pair. All 32 lanes must call.
// block_online_merge<WARPS>(m, s)
//   Every thread gets the block's pair. blockDim.x a multiple of 32, every thread calls. WARPS is
//   the block's warp count when it is a compile-time constant (kernels templated on the block
//   size); 0, the default, reads blockDim.x. 66 floats of static shared memory; no dynamic shared
//   memory. Its two barriers also order every thread's reads before the call against writes after
//   it. It does not end with a barrier: call it once per kernel (or put a __syncthreads() between
//   two calls).

#ifndef KERNELS_COMMON_ONLINE_SOFTMAX_CUH
#define KERNELS_COMMON_ONLINE_SOFTMAX_CUH

#include <cfloat>

__device__ __forceinline__ void online_update(float& m, float& s, float x) {
    float mm = fmaxf(m, x);
    s = s * expf(m - mm) + expf(x - mm);
    m = mm;
}

__device__ __forceinline__ void online_update4(float& m, float& s, float4 v) {
    float mm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    s = s * expf(m - mm) + ((expf(v.x - mm) + expf(v.y - mm)) + (expf(v.z - mm) + expf(v.w - mm)));
    m = mm;
}

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__device__ __forceinline__ void warp_online_merge(float& m, float& s) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        online_merge(m, s, m2, s2);
    }
}

template <int WARPS = 0>
__device__ __forceinline__ void block_online_merge(float& m, float& s) {
    __shared__ float warp_m[32], warp_s[32];
    __shared__ float row_m, row_s;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    int warps = WARPS > 0 ? WARPS : blockDim.x / 32;
    warp_online_merge(m, s);
    if (lane == 0) {
        warp_m[wid] = m;
        warp_s[wid] = s;
    }
    __syncthreads();
    if (wid == 0) {
        float wm = lane < warps ? warp_m[lane] : -FLT_MAX;
        float ws = lane < warps ? warp_s[lane] : 0.0f;
        warp_online_merge(wm, ws);
        if (lane == 0) {
            row_m = wm;
            row_s = ws;
        }
    }
    __syncthreads();
    m = row_m;
    s = row_s;
}

#endif  // KERNELS_COMMON_ONLINE_SOFTMAX_CUH

// ---- end online_softmax.cuh ----  // online_update, block_online_merge
// ---- begin softmax_bf16.cuh ----
// softmax_bf16.cuh: what the bf16 versions of the softmax-over-a-row families share: a bf16 row
// split into scalars and an aligned body of 16-byte packs, eight bf16 moved and held as four
// 32-bit words, widened to floats and rounded back once, the online (max, sum) pair folded eight
// values at a time, the passes over a row's body (fold, then map) and a row cached in registers.
//
// Shared because softmax_forward 9-10 and fused_classifier 5-6 all read rows of bf16 eight values
// (16 bytes) at a time and do their arithmetic in float; what differs between them is where the
// row lives between the passes (L2 or registers) and what they write, not these steps.
// Requires sm_80 or later (bf16x2 conversions and max).
//
// Words8 (a uint4): the 16 bytes of a Pack8 (bf16.cuh) as four 32-bit words, two bf16 each, value
//   2j in the low half of word j. This is the form a kernel keeps in registers: a Pack8 held in a
//   register array is split by the compiler into eight 16-bit values, and each of those takes a
//   whole 32-bit register, twice the registers the data needs (a row cached in registers spills).
// row_head(p, len)
//   How many bf16 columns of the row at p come before its first 16-byte boundary: 0-7, at most
//   len. p must be 2-byte aligned (any bf16 pointer is). Rows of odd length start on any even
//   address, so each row finds its own split: [0, head) scalars, then whole packs from p + head.
// split_row(p, real, len, vector)
//   A row of len bf16 at p whose first `real` columns are the ones to fold: {head, n8, rest} with
//   [0, head) scalars up to the first 16-byte boundary, [head, rest) n8 whole packs of real
//   columns, [rest, len) scalars (the last 0-7 real columns, then any others). vector = false
//   (e.g. an output misaligned differently from its input) makes the whole row scalars.
// load_words(p), load_words_stream(p), store_words_stream(p, w)
//   16-byte loads and stores (p 16-byte aligned): plain, or with the streaming hints (__ldcs /
//   __stcs: evict first, for data touched for the last time).
// unpack8(w, f)
//   f[j] = the j-th value, widened to float (exact): a bf16 is the top half of a float, so each
//   value is one shift or mask of its word.
// unpack8_again(w, f)
//   The same, by byte permutes: for a second pass over words held in registers (see below).
// pack8(f)
//   Eight floats rounded to bf16 (round to nearest even), two per conversion instruction.
// neg_inf8()
//   Eight -inf: what a register slot past the end of the row holds, so that a max or a sum of exp
//   over the slots needs no per-slot test (exp(-inf - m) = 0, max(m, -inf) = m).
// max8(m, w)
//   m (a pair of bf16) <- the elementwise max of m and the four pairs of w: max is exact in bf16,
//   so the values need not be widened (four bf16x2 max instructions for eight values).
// online_update8(m, s, f)
//   Fold eight values into a running (max, sum) pair (see online_softmax.cuh): one rescale of the
//   old sum for the eight, nine exps instead of the sixteen of eight online_update calls.
// softmax8(w, m, inv)
//   softmax_forward's output for eight values, exp(x - m) * inv with inv = 1 / sum, rounded once.
// classifier_grad8(w, col, m, b, dloss, target), classifier_grad1(x, col, m, b, dloss, V, target)
//   fused_classifier's gradient, (softmax - onehot(target)) * dloss with b = dloss / sum, for the
//   pack of real columns col..col+7 (one compare finds the target in it), or for the scalar
//   column col of row x (padding, col >= V, gets 0); rounded once to bf16. target -1: none.
//
// The passes over a row's body (packs 0..n8-1 from `body`, 16-byte aligned), each thread taking
// packs first, first + stride, ...:
// fold_packs<UNROLL>(m, s, body, first, n8, stride)
//   Fold the packs into the thread's (m, s) with online_update8, UNROLL loads issued before any is
//   used. Plain loads: a later pass reads the row again, from L2.
// map_packs<UNROLL>(dst, src, first, n8, stride, f)
//   dst pack i = f(src pack i, i), UNROLL loads in flight, evict-first loads (the row's last read)
//   and streaming stores. dst may be src: each pack is read and written by the same thread.
// A row cached in registers, K slots per thread of a BLOCK-thread block, slot k holding pack
// tid + k*BLOCK; `mine` points at pack tid, and slot k exists iff k*BLOCK < left = n8 - tid (one
// base pointer and constant offsets: addresses computed per slot would be kept for the stores,
// two registers each):
// load_slots<BLOCK>(r, mine, left)
//   Issue every slot's load (evict-first: the row is read from memory once) before any is used;
//   slots past the row get neg_inf8().
// slots_pair(r, m, s)
//   The slots' exact max (on bf16 pairs: max needs no widening) and the sum of exp(x - m) over
//   their widened values. A thread with no slot gets the empty pair (-FLT_MAX, 0): an -inf max
//   would give exp(-inf + inf) = NaN.

#ifndef KERNELS_COMMON_SOFTMAX_BF16_CUH
#define KERNELS_COMMON_SOFTMAX_BF16_CUH

#include <cfloat>
#include <cstdint>
// (already included: bf16.cuh)

typedef uint4 Words8;

__device__ __forceinline__ int row_head(const bf16* p, int len) {
    return min((int)((16 - ((uintptr_t)p & 15)) & 15) / 2, len);
}

struct RowSplit {
    int head, n8, rest;
};

__device__ __forceinline__ RowSplit split_row(const bf16* p, int real, int len, bool vector = true) {
    int head = vector ? row_head(p, len) : len;
    int n8 = real > head ? (real - head) / 8 : 0;
    return {head, n8, head + 8 * n8};
}

__device__ __forceinline__ Words8 load_words(const bf16* p) {
    return *reinterpret_cast<const Words8*>(p);
}

__device__ __forceinline__ Words8 load_words_stream(const bf16* p) {
    return __ldcs(reinterpret_cast<const Words8*>(p));
}

__device__ __forceinline__ void store_words_stream(bf16* p, Words8 w) {
    __stcs(reinterpret_cast<Words8*>(p), w);
}

__device__ __forceinline__ void unpack8(Words8 w, float f[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        f[2 * j] = __uint_as_float(words[j] << 16);
        f[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
}

// The same eight floats from byte permutes instead of shifts and masks: for a pass that widens
// words an earlier pass widened too. The compiler cannot tell the two apart, so it widens again
// (one instruction a value) instead of keeping the earlier pass's floats alive in between, which
// takes two registers per word held: a row cached in registers would spill.
__device__ __forceinline__ void unpack8_again(Words8 w, float f[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {  // selector nibbles: result bytes 3..0 from (zero, zero, byte 1, byte 0)
        f[2 * j] = __uint_as_float(__byte_perm(words[j], 0u, 0x1044));
        f[2 * j + 1] = __uint_as_float(__byte_perm(words[j], 0u, 0x3244));
    }
}

// Two floats rounded to one word of two bf16, lo in the low half.
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned w;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));  // d = {a: high half, b: low}
    return w;
}

__device__ __forceinline__ Words8 pack8(const float f[8]) {
    return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
}

__device__ __forceinline__ Words8 neg_inf8() {
    const unsigned bits = 0xFF80FF80u;  // two bf16 -inf
    return make_uint4(bits, bits, bits, bits);
}

__device__ __forceinline__ unsigned bf16x2_max(unsigned a, unsigned b) {
    unsigned d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ void max8(unsigned& m, Words8 w) {
    m = bf16x2_max(bf16x2_max(m, w.x), bf16x2_max(w.y, bf16x2_max(w.z, w.w)));
}

// The larger of the two bf16 of a max8 pair, widened.
__device__ __forceinline__ float max_of_pair(unsigned m) {
    return fmaxf(__uint_as_float(m << 16), __uint_as_float(m & 0xffff0000u));
}

__device__ __forceinline__ void online_update8(float& m, float& s, const float f[8]) {
    float mm = m;
#pragma unroll
    for (int j = 0; j < 8; j++) mm = fmaxf(mm, f[j]);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) sum += expf(f[j] - mm);
    s = s * expf(m - mm) + sum;
    m = mm;
}

__device__ __forceinline__ Words8 softmax8(Words8 w, float m, float inv) {
    float f[8];
    unpack8_again(w, f);  // for a row held in registers, whose slots were widened for the sum
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = expf(f[j] - m) * inv;
    return pack8(f);
}

__device__ __forceinline__ Words8 classifier_grad8(Words8 w, int col, float m, float b, float dloss,
                                                   int target) {
    float f[8];
    unpack8_again(w, f);  // for the row held in registers, whose slots were widened for the sum
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = expf(f[j] - m) * b;
    unsigned c = (unsigned)(target - col);  // target < 0 wraps to a huge value
    if (c < 8u) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j == c) f[j] -= dloss;
    }
    return pack8(f);
}

__device__ __forceinline__ bf16 classifier_grad1(const bf16* x, int col, float m, float b, float dloss,
                                                 int V, int target) {
    if (col >= V) return to_bf16(0.0f);
    float g = expf(to_float(x[col]) - m) * b;
    return to_bf16(col == target ? g - dloss : g);
}

template <int UNROLL>
__device__ __forceinline__ void fold_packs(float& m, float& s, const bf16* body, int first, int n8, int stride) {
    for (int base = first; base < n8; base += UNROLL * stride) {
        Words8 p[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {  // all loads first: UNROLL requests in flight
            int i = base + u * stride;
            if (i < n8) p[u] = load_words(body + 8 * i);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            if (base + u * stride < n8) {
                float f[8];
                unpack8(p[u], f);
                online_update8(m, s, f);
            }
        }
    }
}

template <int UNROLL, typename F>
__device__ __forceinline__ void map_packs(bf16* dst, const bf16* src, int first, int n8, int stride, F f) {
    for (int base = first; base < n8; base += UNROLL * stride) {
        Words8 p[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * stride;
            if (i < n8) p[u] = load_words_stream(src + 8 * i);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * stride;
            if (i < n8) store_words_stream(dst + 8 * i, f(p[u], i));
        }
    }
}

template <int BLOCK, int K>
__device__ __forceinline__ void load_slots(Words8 (&r)[K], const bf16* mine, int left) {
#pragma unroll
    for (int k = 0; k < K; k++) r[k] = k * BLOCK < left ? load_words_stream(mine + 8 * k * BLOCK) : neg_inf8();
}

template <int K>
__device__ __forceinline__ void slots_pair(const Words8 (&r)[K], float& m, float& s) {
    unsigned m2 = neg_inf8().x;
#pragma unroll
    for (int k = 0; k < K; k++) max8(m2, r[k]);
    m = fmaxf(max_of_pair(m2), -FLT_MAX);
    s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        float f[8];
        unpack8(r[k], f);
#pragma unroll
        for (int j = 0; j < 8; j++) s += expf(f[j] - m);  // -inf slots add exp(-inf) = 0
    }
}

#endif  // KERNELS_COMMON_SOFTMAX_BF16_CUH

// ---- end softmax_bf16.cuh ----    // split_row, fold_packs, map_packs, classifier_grad8/1

#define UNROLL 4

extern "C" __global__ void fused_classifier5(bf16* logits, float* losses, const int* targets,
                                             float dloss, int N, int V, int Vp) {
    int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    bf16* x = logits + (size_t)row * Vp;
    int t = targets[row];
    int target = (t >= 0 && t < V) ? t : -1;  // -1 matches no column

    // [0, head): scalars up to the first 16-byte boundary; [head, rest): n8 packs of real columns;
    // [rest, Vp): scalars, the last real columns then the padding.
    RowSplit split = split_row(x, V, Vp);
    int head = split.head, n8 = split.n8, rest = split.rest;
    bf16* body = x + head;

    float m = -FLT_MAX, s = 0.0f;
    for (int col = tid; col < min(head, V); col += nt) online_update(m, s, to_float(x[col]));
    for (int col = rest + tid; col < V; col += nt) online_update(m, s, to_float(x[col]));
    fold_packs<UNROLL>(m, s, body, tid, n8, nt);  // plain loads: the second pass wants the row in L2
    float x_target = (tid == 0 && target >= 0) ? to_float(x[target]) : 0.0f;

    block_online_merge(m, s);  // its barriers also order every read above before every write below
    if (tid == 0) losses[row] = target >= 0 ? logf(s) + m - x_target : __int_as_float(0x7fc00000);
    float b = 1.0f / s * dloss;  // expf(x - m) * b = softmax * dloss

    for (int col = tid; col < head; col += nt) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    for (int col = rest + tid; col < Vp; col += nt) x[col] = classifier_grad1(x, col, m, b, dloss, V, target);
    map_packs<UNROLL>(body, body, tid, n8, nt, [&](Words8 w, int i) {
        return classifier_grad8(w, head + 8 * i, m, b, dloss, target);
    });
}
