/*
title = "Flash attention on bf16 tensor cores: mma.m16n8k16, ldmatrix, cp.async double buffering"
precision = "bf16"
changed = """
Version 7's structure in bf16 (q, k, v and out bf16; scores, softmax and output accumulated in fp32;
lse fp32), with the moves that feed the tensor cores fast: m16n8k16 bf16 MMAs (twice the work of
a TF32 m16n8k8 per instruction), operands fetched from shared memory with ldmatrix (one
instruction fills a whole 16 x 16 A fragment or the B fragments of two 8-wide n-tiles; .trans
turns V's rows into the B layout of P V for free), Q held in registers for the whole loop, P
passed from the score accumulators to the A operand of P V without touching shared memory, and
K/V tiles copied with cp.async into a second buffer while the current one is computed.
"""
why = """
Attention's two matmuls are 95% of its FLOPs; bf16 mma.sync does them at twice the rate of TF32
and roughly ten times that of version 6's FP32 FMAs (an H100 SM, in FLOPs a clock: 256 on the
FP32 pipes, 4096 bf16 through Hopper's wgmma, which this course leaves for later, and about 60%
of that through mma.sync). What is left must not stall them:
* Loads overlap compute: tile j + 1 is in flight (cp.async, no registers, no L1) while tile j is
  multiplied; two barriers per tile (tile j visible; tile j's buffer free again).
* ldmatrix moves 512 bytes per warp instruction into exactly the fragment layout the mma wants;
  rows are padded to HSP + 8 elements (144 bytes for HSP = 64, 16 mod 128), so the 8 rows one
  8 x 8 matrix reads start in 8 different 16-byte bank groups: no conflicts.
* The S = Q K^T accumulator layout of two adjacent 8-key n-tiles is, element for element, the A
  fragment layout of P for the next mma: P is rounded to bf16 pairs in registers (16 cvt per
  lane per tile) and goes straight into P V.
* The softmax works in base 2 on scaled scores (one FFMA + one ex2 per score); the row max and
  sum are two xor shuffles over the 4 lanes that share a row; the output is rescaled in
  registers. Only the diagonal tile is masked, and the loop stops there.
* Long query tiles (late in the sequence, most keys) are scheduled first.
Sizes per block: 64 query rows (4 warps x 16 rows), 64-key tiles, head zero-padded to HSP = 64 or
128. Shared memory (HSP + 8) x 64 x 2 B per tile x (Q + 2 K + 2 V) = 45 KB (HSP 64) or 85 KB.
"""
preconditions = ["HS <= 128"]

# head sizes that are a multiple of 8: 16-byte cp.async rows; others: element-wise loads, same
# kernel otherwise. HSP = 64 for HS <= 64 (smaller heads are zero-padded), 128 above.
[[launch]]
kernel = "attention_forward8_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward8_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 5 * 64 * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]
*/
// ---- begin attention_mma.cuh ----
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
// ---- begin mma.cuh ----
// mma.cuh: warp-level tensor-core instructions (mma.sync, ldmatrix) and asynchronous copies
// (cp.async) as inline PTX, with the fragment layouts that say which lane holds which element.
//
// Shared because every tensor-core version (attention_forward 7 and 8, and any later matmul-like
// kernel that feeds the tensor cores from registers) needs the same few instructions, and the
// layouts below are the part that is easy to get wrong. Everything here is sm_80+ (Ampere, Hopper).
//
// ---- Notation --------------------------------------------------------------------------------
// A warp's 32 lanes are seen as 8 groups of 4:
//     g = lane / 4   ("groupID" in the PTX ISA): 0..7, picks a ROW of A, C and a COLUMN of B
//     t = lane % 4   ("threadID_in_group"):      0..3, picks the columns (the k index) of A and B
// An mma computes D (M x N) = A (M x K) * B (K x N) + C, "row.col": A is read as rows of K, B as
// columns of K. Each lane holds a few elements of each matrix in registers ("its fragment").
// Registers that hold 16-bit elements hold two: the element with the smaller column (A, C) or
// row (B) index sits in the LOW 16 bits.
//
// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (mma_bf16_16816) -------------------
// A: 16 x 16 bf16, 4 registers of 2:     a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//                                        a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//    i.e. the four 8 x 8 quarters of A in the order top-left, bottom-left, top-right, bottom-right,
//    each quarter spread over the warp the same way: lane (g, t) holds row g, columns 2t, 2t+1.
// B: 16 x 8 bf16 (K x N), 2 registers:  b[0] = B[2t, 2t+1  ][g]       b[1] = B[2t+8, 2t+9][g]
//    i.e. the top and bottom 8 x 8 halves of B; lane (g, t) holds column g, rows 2t, 2t+1.
//    If B = K^T for a row-major K (N rows of K elements), B[k][n] = K[n][k]: b[0] is the pair
//    K[g][2t], K[g][2t+1], adjacent in memory. That is what ".col" means.
// C, D: 16 x 8 f32, 4 registers:        c[0], c[1] = C[g    ][2t], C[g    ][2t+1]
//                                        c[2], c[3] = C[g + 8][2t], C[g + 8][2t+1]
//
// ---- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (mma_tf32_1688) ----------------------
// tf32 elements are 32-bit registers (fp32 bits with the low 13 mantissa bits cleared: to_tf32).
// A: 16 x 8, 4 registers:   a[0] = A[g][t]   a[1] = A[g + 8][t]   a[2] = A[g][t + 4]   a[3] = A[g + 8][t + 4]
// B: 8 x 8 (K x N), 2:      b[0] = B[t][g]   b[1] = B[t + 4][g]
// C, D: 16 x 8 f32: the same layout as for m16n8k16 above.
// Note that A's columns (t, t + 4) differ from C's (2t, 2t + 1): a C fragment cannot be fed back
// as an A fragment directly, unless the k index is renumbered (see attention_forward 7).
//
// ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (ldmatrix_x4, ldmatrix_x4_trans) -------
// Loads four 8 x 8 matrices of 16-bit elements from shared memory, one register per matrix.
// Each matrix row is 8 consecutive elements (16 bytes, 16-byte aligned), and each lane supplies
// the address of ONE row: lanes 0-7 the rows 0-7 of matrix 0, lanes 8-15 those of matrix 1,
// lanes 16-23 matrix 2, lanes 24-31 matrix 3. The rows may be anywhere (any stride).
// Result, register i from matrix i:
//   plain:  lane (g, t) gets row g, elements 2t and 2t+1      (= an A quarter or a B half of K^T)
//   .trans: lane (g, t) gets rows 2t and 2t+1 of column g    (= a B half when B is stored K-major,
//           e.g. V in P V: B[k][n] = V[k][n] with V rows in memory)
// So one ldmatrix_x4 fills a whole m16n8k16 A fragment (matrices = the four quarters, in the
// order above), or the B fragments of two n-tiles (matrices = n-tile 0 top/bottom, n-tile 1
// top/bottom). Bank conflicts: the 8 rows of one matrix are read together; they are conflict-free
// when their start addresses fall in 8 different 16-byte bank groups (row stride = 16 mod 128
// bytes, e.g. a padded row, or an XOR swizzle).
//
// ---- cp.async.cg.shared.global (cp_async_16, cp_async_commit, cp_async_wait<N>) ---------------
// cp_async_16(dst, src, valid): copies 16 bytes global -> shared without passing through
// registers (and without L1: .cg). If !valid, src is not read and dst is filled with zeros
// (src-size 0); src must still be a valid-looking address (pass the tensor's base). Both
// addresses 16-byte aligned. The copy is asynchronous: cp_async_commit() closes a group of the
// copies issued so far by this thread; cp_async_wait<N>() waits until at most N of this thread's
// groups are still in flight. Other threads' copies are visible only after a barrier
// (__syncthreads) that follows every thread's wait.
//
// ---- Conversions ----
// to_tf32(x): cvt.rna.tf32.f32, x rounded to the nearest tf32 (10 mantissa bits; ties away from 0).
// pack_bf16x2(lo, hi): two floats rounded to bf16 (nearest even), lo in the low half.

#ifndef KERNELS_COMMON_MMA_CUH
#define KERNELS_COMMON_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

// D = A B + D (accumulates in place).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `row` is this lane's row address (see the layout above): a generic pointer into shared memory,
// or a 32-bit shared-space address (smem_addr; half the registers of a pointer, and a constant
// offset folds into the instruction).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_addr(row)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_trans(r, smem_addr(row)); }

// dst: a generic pointer into shared memory, or its 32-bit shared-space address (smem_addr).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) { cp_async_16(smem_addr(dst), src, valid); }

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

#endif  // KERNELS_COMMON_MMA_CUH

// ---- end mma.cuh ----
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

// ---- end reduce.cuh ----

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

// ---- end attention_mma.cuh ----  // load_tile, tile_ready, mask_causal, online_softmax, store_rows
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
// (already included: mma.cuh)            // mma_bf16_16816, ldmatrix, cp.async: the fragment layouts

#define BR 64        // query rows per block: 4 warps x 16
#define BC 64        // keys per tile
#define THREADS 128

// The warp's tile products, on tiles in shared memory with row stride S elements:
// q_fragments_bf16: its Q fragments for KT 16-channel steps (q_rows: the warp's first Q row);
// qk_bf16: the scores of NT / 2 pairs of 8-key n-tiles (s is set, not accumulated);
// pv_bf16: o += p V for DT 8-channel n-tiles (p: the probabilities, in the layout of s, rounded
// to bf16 here). k_rows / v_rows: this lane's ldmatrix row in the K / V tile (shared-space bytes).
//
// Fragment maps (g = lane / 4, t = lane % 4; the layouts are in mma.cuh):
// S = Q K^T, per warp 16 rows x 8 NT keys, as KT k-steps of 16 channels x NT / 2 pairs of 8-key
// n-tiles.
//   A = Q[16 rows][16 channels]: ldmatrix_x4, matrices = the quarters (rows 0-7 | 8-15) x
//     (channels 0-7 | 8-15) in the order top-left, bottom-left, top-right, bottom-right. Lane l
//     gives the address of row (l % 16), channel 8 (l / 16): lanes 0-7 rows 0-7 / ch 0, lanes
//     8-15 rows 8-15 / ch 0, lanes 16-23 rows 0-7 / ch 8, lanes 24-31 rows 8-15 / ch 8.
//   B = K^T for keys 16p..16p+15 (n-tiles 2p and 2p+1): B[k][n] = K[key n][channel k], so the
//     B layout's pair (k = 2t, 2t+1; n = g) is K[g][2t..2t+1], adjacent: plain ldmatrix on K's
//     rows. Lane l gives key 16p + (l % 8) + 8 (l / 16), channel 16kk + 8 ((l / 8) % 2), so the
//     matrices are (keys 0-7, ch 0-7) = b0 of n-tile 2p, (keys 0-7, ch 8-15) = b1 of 2p,
//     (keys 8-15, ch 0-7) = b0 of 2p+1, (keys 8-15, ch 8-15) = b1 of 2p+1.
// O += P V: per warp 16 rows x 8 DT channels, as NT / 2 k-steps of 16 keys x DT / 2 pairs of
// 8-channel n-tiles.
//   A = P[16 rows][keys 16kk..16kk+15]: the A layout wants (row g, keys 2t, 2t+1) in a[0],
//     (g+8, 2t..) in a[1], (g, 2t+8..) in a[2], (g+8, 2t+8..) in a[3]. S's n-tile 2kk holds
//     (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) of keys 16kk.., n-tile 2kk+1 the same for keys
//     16kk+8..: a = { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] }, packed to bf16.
//     The score accumulators become the next mma's operand without leaving registers.
//   B = V[keys][channels 16p..16p+15]: B[k][n] = V[key k][channel n], pair (k = 2t, 2t+1; n = g)
//     is two different rows of V: ldmatrix .trans on V's rows hands lane (g, t) rows 2t, 2t+1
//     of column g. Lane l gives key 16kk + (l % 16), channel 16p + 8 (l / 16) (Q's pattern), so
//     the matrices are (keys 0-7, ch 0-7) = b0 of n-tile 2p, (keys 8-15, ch 0-7) = b1 of 2p,
//     (keys 0-7, ch 8-15) = b0 of 2p+1, (keys 8-15, ch 8-15) = b1 of 2p+1.
// Both B orders are chosen so that each n-tile's (b0, b1) are consecutive destination registers
// of the ldmatrix: the mma reads B as an aligned register pair, and any other pairing costs a
// register move per operand (K's lane pattern for V would save one address register, and cost
// ~30 moves a tile).

// This lane's ldmatrix row in a K tile and in a V tile (the patterns above), as shared-space
// addresses; a 16-row / 16-element step adds a constant.
template <int S>
__device__ __forceinline__ uint32_t k_rows_bf16(const __nv_bfloat16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 8 + 8 * (lane / 16)) * S + 8 * (lane / 8 % 2));
}

template <int S>
__device__ __forceinline__ uint32_t v_rows_bf16(const __nv_bfloat16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 16) * S + 8 * (lane / 16));
}

template <int KT, int S>
__device__ __forceinline__ void q_fragments_bf16(uint32_t (&qf)[KT][4], const __nv_bfloat16* q_rows) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) ldmatrix_x4(qf[kk], q_rows + (lane % 16) * S + 16 * kk + 8 * (lane / 16));
}

template <int KT, int NT, int S>
__device__ __forceinline__ void qk_bf16(float (&s)[NT][4], const uint32_t (&qf)[KT][4], uint32_t k_rows) {
#pragma unroll
    for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;  // ptxas feeds RZ instead
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int p = 0; p < NT / 2; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k_rows + (16 * p * S + 16 * kk) * 2);  // 2 bytes an element
            mma_bf16_16816(s[2 * p], qf[kk], kb[0], kb[1]);
            mma_bf16_16816(s[2 * p + 1], qf[kk], kb[2], kb[3]);
        }
}

template <int NT, int DT, int S>
__device__ __forceinline__ void pv_bf16(float (&o)[DT][4], const float (&p)[NT][4], uint32_t v_rows) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        const uint32_t pa[4] = {pack_bf16x2(p[2 * kk][0], p[2 * kk][1]), pack_bf16x2(p[2 * kk][2], p[2 * kk][3]),
                                pack_bf16x2(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                pack_bf16x2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v_rows + (16 * kk * S + 16 * n) * 2);
            mma_bf16_16816(o[2 * n], pa, vb[0], vb[1]);
            mma_bf16_16816(o[2 * n + 1], pa, vb[2], vb[3]);
        }
    }
}

template <int HSP, bool ASYNC>
__device__ __forceinline__ void attention_forward8_body(bf16* out, float* lse, const bf16* qkv, int T, int NH,
                                                        int HS, float sl) {
    constexpr int S = HSP + 8;   // shared row stride in elements (see "why": conflict-free ldmatrix)
    constexpr int KT = HSP / 16; // k-steps of Q K^T
    constexpr int NT = BC / 8;   // 8-key n-tiles of S
    constexpr int DT = HSP / 8;  // 8-channel n-tiles of O
    extern __shared__ float4 smem4[];
    bf16* Qs = reinterpret_cast<bf16*>(smem4);
    bf16* Ks = Qs + BR * S;      // two buffers of BC rows
    bf16* Vs = Ks + 2 * BC * S;  // two buffers of BC rows

    const int warp = threadIdx.x / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int row0 = q0 + 16 * warp;                    // this warp's first query row
    const int C = NH * HS;
    const int rs = 3 * C;                               // qkv row stride
    const bf16* base = head_rows(qkv, 0, T, NH, HS);     // q of row 0 of this block's head
    const int tiles = q0 / BC + 1;                      // key tiles 0 .. the diagonal one (BC == BR)

    // Q (one group), then K/V tile 0 (a second group): wait for Q only, take its fragments.
    load_tile<bf16, BR, HSP, S, THREADS, ASYNC>(Qs, base + (size_t)q0 * rs, rs, T - q0, HS);
    cp_async_commit();
    load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Ks, base + C, rs, T, HS);
    load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Vs, base + 2 * C, rs, T, HS);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[KT][4];
    q_fragments_bf16<KT, S>(qf, Qs + 16 * warp * S);
    const uint32_t k_lane = k_rows_bf16<S>(Ks), v_lane = v_rows_bf16<S>(Vs);  // ldmatrix rows, buffer 0

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int j = 0; j < tiles; j++) {
        const int k0 = j * BC;
        tile_ready(j, tiles, [&] {  // prefetch tile j + 1 into the other buffer
            const bf16* next = head_rows(qkv, k0 + BC, T, NH, HS);
            const int nb = (j + 1) % 2 * BC * S;
            load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Ks + nb, next + C, rs, T - k0 - BC, HS);
            load_tile<bf16, BC, HSP, S, THREADS, ASYNC>(Vs + nb, next + 2 * C, rs, T - k0 - BC, HS);
        });
        // This lane's ldmatrix row addresses in the current buffers (shared-space bytes).
        const uint32_t buf = j % 2 * BC * S * sizeof(bf16), kc = k_lane + buf, vc = v_lane + buf;

        float s[NT][4];
        qk_bf16<KT, NT, S>(s, qf, kc);
        if (k0 == q0) mask_causal(s, k0, row0);  // the diagonal tile: keys past the row
        online_softmax(s, o, m, l, sl);

        pv_bf16<NT, DT, S>(o, s, vc);
        __syncthreads();  // everyone is done with buffer j % 2 before iteration j + 1 refills it
    }

    store_rows<ASYNC>(out, lse, o, m, l, sl, row0, T, NH, HS);
}

// Blocks per SM the register budget must allow: 4 (<= 128 registers a thread: 16 warps an SM,
// with 4 x 45 KB of shared memory) for HSP = 64, whose Q, S and O fragments alone take 80
// registers; 2 for HSP = 128 (Q and O double). 128 is tight: ptxas (CUDA 13.0) fits the loop
// without spills only since the per-tile addresses are recomputed (fresh_block_x); if another
// compiler spills, 3 (<= 168 registers, 12 warps) is the fallback.
#define ENTRY(name, HSP, ASYNC, MIN_BLOCKS)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)                              \
    name(bf16* out, float* lse, const bf16* qkv, int T, int NH, int HS, float sl) {                 \
        attention_forward8_body<HSP, ASYNC>(out, lse, qkv, T, NH, HS, sl);                          \
    }
ENTRY(attention_forward8_hs64, 64, true, 4)
ENTRY(attention_forward8_hs128, 128, true, 2)
ENTRY(attention_forward8_hs64_any, 64, false, 3)
ENTRY(attention_forward8_hs128_any, 128, false, 2)
