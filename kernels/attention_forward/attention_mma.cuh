// attention_mma.cuh: the pieces the tensor-core flash-attention versions (attention_forward 7 in
// TF32, 8 in bf16) share: staging a tile of rows into shared memory, the double-buffer step of
// the key loop, the causal mask and the online softmax applied to score fragments, and the
// epilogue (normalise, write out and lse).
//
// Shared because the two versions differ only in their tensor-core instruction and element type;
// the softmax bookkeeping around the mma is the same line for line. The mma fragment layouts
// these functions assume are documented in mma.cuh.
//
// A warp owns 16 query rows. Its scores for a tile of keys are NT accumulator fragments of
// m16n8 (8 keys each): s[j][e] is the score of
//     row  = row0 + g + 8 * (e / 2)          (e = 0, 1: row g; e = 2, 3: row g + 8)
//     key  = key0 + 8 * j + 2 * t + (e % 2)
// with g = lane / 4 and t = lane % 4 (mma.cuh's C layout). The output accumulators o[n][e] use
// the same layout with channel 8 n + 2 t + (e % 2) in place of the key. So a lane holds two rows
// (r = 0: row g; r = 1: row g + 8), and each row is spread over the 4 lanes of its group:
// row-wide max and sum are warp_max<4> / warp_sum<4> (two xor shuffles, reduce.cuh).
//
// load_tile<T, ROWS, HSP, STRIDE, THREADS, ASYNC>(dst, src, row_stride, rows_left, HS)
//   dst[r * STRIDE + d] = src[r * row_stride + d] for r < ROWS, d < HSP; zero where
//   r >= rows_left or d >= HS (padding rows past T and channels past the head size must be zeros:
//   a zero key row scores 0, a zero value row adds 0 x p; garbage could be NaN, and 0 x NaN = NaN).
//   ASYNC: 16-byte cp.async copies (the caller commits and waits); needs HS a multiple of
//   16 / sizeof(T), src 16-byte aligned at every row, STRIDE * sizeof(T) a multiple of 16, and
//   THREADS a multiple of the copies per row, ROWS of the rows one pass of THREADS copies covers.
//   Otherwise element by element, synchronously (any HS: the path for odd head sizes).
// mask_causal(s, key0, row0): s = -inf where key > row (the diagonal tile only).
// online_softmax(s, o, m, l, sl): folds a tile of raw scores into the running row max m (of raw
//   scores), the lane's share of the row sum l (of 2^(score * sl - m * sl)) and the output o
//   (rescaled by 2^((m_old - m_new) * sl)); s is replaced by the unnormalised probabilities
//   p = 2^(s * sl - m_new * sl). sl = log2(e) / sqrt(HS), so 2^(s * sl) = exp(s / sqrt(HS)).
// for_each_copied<T, ROWS, HSP, STRIDE, THREADS, ASYNC>(dst, f): f(element) for each element of
//   dst that this thread's load_tile of the same parameters wrote (ASYNC: 16-byte pieces of rows
//   r0, r0 + ROWS_PER_PASS, ...; else every THREADS-th element), e.g. to convert them in place
//   once they have landed, before the barrier that shows them to the other threads.
// tile_ready(j, tiles, load_next[, landed]): the double-buffer step at the top of key tile j. If a
//   tile j + 1 exists, load_next() issues its copies (into the buffer tile j - 1 used: free since
//   the barrier that ended iteration j - 1) as a new group, and we wait for all groups but that
//   one; else for all. Then landed() (this thread's copies of tile j are in shared memory, the
//   others' not yet visible), and the barrier that makes every thread's part of tile j visible.
//   The caller ends each iteration with __syncthreads(), so tile j's buffer is not refilled while
//   being read.
// store_out<PAIRS>(out, o, scale, row0, T, NH, HS): out = o x scale[r] for the head
//   blockIdx.x = b * NH + h, out (B, T, NH * HS); rows >= T skipped. PAIRS: channels 2t and
//   2t + 1 in one 4- (bf16) or 8-byte (fp32) store: needs HS even.
// store_rows<PAIRS>(out, lse, o, m, l, sl, row0, T, NH, HS): the softmax epilogue: per row
//   (r = 0, 1), the row sum over the 4 lanes, lse = ln sum exp(s / sqrt(HS)) (lane t == 0;
//   lse (B, NH, T)), out = o / sum. Every lane must call (shuffles).
// head_rows(qkv, row, T, NH, HS): &qkv[b, row, 0, h, 0] for the head blockIdx.x = b * NH + h of
//   qkv (B, T, 3, NH, HS): its q row `row`; + C gives k, + 2C gives v (C = NH * HS). Computed
//   from fresh_block_x, so it may be called inside the key loop at no register cost.
// fresh_block_x(): blockIdx.x read through an asm volatile, which the compiler can neither merge
//   with an earlier read nor hoist out of a loop. For values needed only now and then (the next
//   tile's address, the epilogue's offsets): computed from blockIdx.x once at the top, the
//   compiler keeps them in registers across the whole key loop, and with the fragments taking
//   most of the registers it spills them instead. Recomputing costs a few integer instructions.

#ifndef KERNELS_COMMON_ATTENTION_MMA_CUH
#define KERNELS_COMMON_ATTENTION_MMA_CUH

#include <stdint.h>

#include "mma.cuh"
#include "reduce.cuh"

// The ASYNC copy pattern: copy k of a thread is the 16-byte piece at row r0 + k ROWS_PER_PASS,
// element d (one pass of THREADS copies covers ROWS_PER_PASS whole rows).
template <typename T, int HSP, int THREADS>
struct CopyPattern {
    static constexpr int E = 16 / sizeof(T);                // elements per 16-byte copy
    static constexpr int PER_ROW = HSP / E;                 // copies per row
    static constexpr int ROWS_PER_PASS = THREADS / PER_ROW;
    static_assert(THREADS % PER_ROW == 0, "whole rows per pass");
    int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * E;
};

template <typename T, int ROWS, int HSP, int STRIDE, int THREADS, bool ASYNC>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int row_stride, int rows_left, int HS) {
    if constexpr (ASYNC) {
        using P = CopyPattern<T, HSP, THREADS>;
        constexpr int ROWS_PER_PASS = P::ROWS_PER_PASS;
        static_assert(ROWS % ROWS_PER_PASS == 0, "whole passes");
        const P pat;
        const int r0 = pat.r0, d = pat.d;
        const T* from = src + r0 * row_stride + d;
        const uint32_t to = smem_addr(dst + r0 * STRIDE + d);
#pragma unroll
        for (int k = 0; k < ROWS / ROWS_PER_PASS; k++) {
            const bool valid = r0 + k * ROWS_PER_PASS < rows_left && d < HS;
            cp_async_16(to + k * ROWS_PER_PASS * STRIDE * sizeof(T), valid ? from : src, valid);
            from += ROWS_PER_PASS * row_stride;
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            int r = i / HSP, d = i % HSP;
            T v = static_cast<T>(0.0f);
            if (r < rows_left && d < HS) v = src[r * row_stride + d];
            dst[r * STRIDE + d] = v;
        }
    }
}

template <int NT>
__device__ __forceinline__ void mask_causal(float (&s)[NT][4], int key0, int row0) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (key0 + 8 * j + 2 * t + (e & 1) > row0 + g + 8 * (e >> 1)) s[j][e] = -INFINITY;
}

template <int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[NT][4], float (&o)[DT][4], float (&m)[2],
                                               float (&l)[2], float sl) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mx = m[r];
#pragma unroll
        for (int j = 0; j < NT; j++) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = warp_max<4>(mx);
        // A row whose every key so far is masked keeps m = -inf; subtracting 0 instead of -inf
        // keeps its p = 2^-inf = 0 (not NaN). Every row of these kernels sees key 0 in its first
        // tile, so this is a guard, not a path the tests take.
        const float ms = mx == -INFINITY ? 0.0f : mx * sl;
        const float alpha = exp2f(m[r] * sl - ms);  // 0 on the first tile (m = -inf)
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 2 * r; e < 2 * r + 2; e++) {
                s[j][e] = exp2f(fmaf(s[j][e], sl, -ms));
                sum += s[j][e];
            }
        l[r] = l[r] * alpha + sum;
        m[r] = mx;
#pragma unroll
        for (int n = 0; n < DT; n++) {
            o[n][2 * r] *= alpha;
            o[n][2 * r + 1] *= alpha;
        }
    }
}

__device__ __forceinline__ int fresh_block_x() {
    int x;
    asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(x));
    return x;
}

template <typename T>
__device__ __forceinline__ const T* head_rows(const T* qkv, int row, int T_, int NH, int HS) {
    const int bh = fresh_block_x();
    return qkv + ((size_t)(bh / NH) * T_ + row) * 3 * NH * HS + (size_t)(bh % NH) * HS;
}

template <typename T, int ROWS, int HSP, int STRIDE, int THREADS, bool ASYNC, typename F>
__device__ __forceinline__ void for_each_copied(T* dst, F f) {
    if constexpr (ASYNC) {
        using P = CopyPattern<T, HSP, THREADS>;
        const P pat;
#pragma unroll
        for (int k = 0; k < ROWS / P::ROWS_PER_PASS; k++) {  // one 16-byte load and store a piece
            int4* piece = reinterpret_cast<int4*>(dst + (pat.r0 + k * P::ROWS_PER_PASS) * STRIDE + pat.d);
            union { int4 v; T e[P::E]; } x{*piece};
#pragma unroll
            for (int e = 0; e < P::E; e++) f(x.e[e]);
            *piece = x.v;
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) f(dst[i / HSP * STRIDE + i % HSP]);
    }
}

template <typename LoadNext, typename Landed>
__device__ __forceinline__ void tile_ready(int j, int tiles, LoadNext load_next, Landed landed) {
    if (j + 1 < tiles) {
        load_next();
        cp_async_commit();
        cp_async_wait<1>();  // all but the newest group: tile j has landed (this thread's part)
    } else {
        cp_async_wait<0>();
    }
    landed();
    __syncthreads();  // ... and every thread's part
}

template <typename LoadNext>
__device__ __forceinline__ void tile_ready(int j, int tiles, LoadNext load_next) {
    tile_ready(j, tiles, load_next, [] {});
}

__device__ __forceinline__ void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float a, float b) {
    *reinterpret_cast<uint32_t*>(p) = pack_bf16x2(a, b);
}
__device__ __forceinline__ void store_one(float* p, float a) { *p = a; }
__device__ __forceinline__ void store_one(__nv_bfloat16* p, float a) { *p = __float2bfloat16_rn(a); }

template <bool PAIRS, int DT, typename T>
__device__ __forceinline__ void store_out(T* out, const float (&o)[DT][4], const float (&scale)[2], int row0,
                                          int T_, int NH, int HS) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int bh = fresh_block_x(), C = NH * HS;
    out += (size_t)(bh / NH) * T_ * C + (size_t)(bh % NH) * HS;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        if (row >= T_) continue;
        T* dst = out + (size_t)row * C;
#pragma unroll
        for (int n = 0; n < DT; n++) {  // o[n][2r + e] is channel 8n + 2t + e
            const int d = 8 * n + 2 * t;
            if (PAIRS) {  // HS even: d < HS covers d + 1
                if (d < HS) store_pair(dst + d, o[n][2 * r] * scale[r], o[n][2 * r + 1] * scale[r]);
            } else {
                if (d < HS) store_one(dst + d, o[n][2 * r] * scale[r]);
                if (d + 1 < HS) store_one(dst + d + 1, o[n][2 * r + 1] * scale[r]);
            }
        }
    }
}

template <bool PAIRS, int DT, typename T>
__device__ __forceinline__ void store_rows(T* out, float* lse, const float (&o)[DT][4], const float (&m)[2],
                                           const float (&l)[2], float sl, int row0, int T_, int NH, int HS) {
    const int g = threadIdx.x % 32 / 4;
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = row0 + g + 8 * r;
        const float sum = warp_sum<4>(l[r]);
        inv[r] = 1.0f / sum;
        if (row < T_ && threadIdx.x % 4 == 0)
            lse[(size_t)fresh_block_x() * T_ + row] = (m[r] * sl + log2f(sum)) * 0.6931471805599453f;  // ln 2 x log2
    }
    store_out<PAIRS>(out, o, inv, row0, T_, NH, HS);
}

#endif  // KERNELS_COMMON_ATTENTION_MMA_CUH
