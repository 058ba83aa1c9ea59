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
#include "bf16.cuh"

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
