/*
title = "Flash attention on TF32 tensor cores: mma.m16n8k8 for Q K^T and P V, fp32 in and out"
variant = "tf32"  # promoted as the family's @tf32 entry: train --attention flash at fp32
changed = """
Version 6's flash loop (64-key tiles up to the diagonal, online softmax, no T x T matrix), with both
matmuls moved from FFMA micro-tiles to the tensor cores: each warp owns 16 query rows and computes
its 16 x 64 score tile and its 16 x HS output with warp-wide mma.sync.m16n8k8 TF32 instructions.
Q's fragments are loaded once into registers; K and V tiles are double-buffered in shared memory
with cp.async; the scores never leave registers: the accumulators of Q K^T become, after the
softmax, the A operand of P V.
"""
why = """
An H100 does ~50 TFLOP/s of fp32 FMAs but several times that in TF32 on its tensor cores: one mma
instruction is 16 x 8 x 8 = 1024 multiply-adds for the whole warp, where an FFMA is 32. Version 6
spends ~2 shared loads per 8 FMAs feeding the FP32 pipes; here a lane issues 1 shared load (8 B)
per mma of K and 2 (4 B) per mma of V. Its cost is precision: TF32 keeps 10 of fp32's 23 mantissa
bits (see the tolerance below).
The fragment lesson: mma's A fragment wants columns (t, t + 4) in a lane and its C fragment gives
(2t, 2t + 1), so P cannot be fed back as is. But a matmul's inner index may be renumbered at will,
as long as A's columns and B's rows are renumbered the same way: we let A-column t of k-step kk
stand for key 8 kk + 2t and column t + 4 for key 8 kk + 2t + 1. Then P's A fragment is exactly
the lane's own score accumulators, and V's B fragment is rows 8 kk + 2t and 8 kk + 2t + 1. The
same renumbering of channels in Q K^T makes each lane's two K values adjacent in memory: one
8-byte shared load per mma.
Rounding to tf32 (cvt.rna: ~3 instructions, no single SASS op) is done once per element: each
thread rounds, in shared memory, the K and V elements its own cp.async copies brought, right
after waiting for them and before the barrier that shows the tile to the other warps. Rounding
the fragments instead would redo it in all 4 warps (288 conversions a lane a tile instead of 96).
Banks: K rows of HSP + 8 floats (HSP: the head padded to 64 or 128; = 8 mod 32 words): the
8-byte loads of a half-warp (rows g, channels 2t) hit 32 different banks; V rows of HSP + 4
(= 4 mod 32): the 4-byte loads of rows 2t, 2t + 1 at channel 8 n + g hit 32 different banks.
"""
preconditions = ["HS <= 128"]
# TF32 rounds q, k (for S) and p, v (for P V) to 11 significant bits: unit roundoff u = 2^-11
# = 4.9e-4 (cvt.rna, to nearest); products are exact and sums fp32 (~1e-7, negligible).
# Scores s = q.k / sqrt(HS): error sum_i q_i k_i (dq_i + dk_i) / sqrt(HS), HS independent terms:
#   standard deviation u sqrt(2/3) = 4e-4 for unit-normal q, k at any HS; worst case
#   2u sum |q_i k_i| / sqrt(HS) = 1.3 u sqrt(HS) = 5e-3 at HS 64. Small heads have heavier tails
#   (a few large q_i k_i dominate).
# lse moves by the p-weighted mean of the score errors: a few times 4e-4 at most in practice.
# out = sum p_j v_j / l: p and v each round by u (|d out| <= 2u sum p_j |v_j| / l <= 2u max|v|,
#   3.4e-3 for |v| <= 3.5), plus the score errors moving the weights (<= max|ds| x spread of v).
#   Independent roundings average out over a row's keys; rows with one or two keys see the full
#   relative u of v: that is what rtol covers.
# An emulation on the CPU (the same roundings, tile-wise running max, float64 otherwise) against
# the reference, at the default sizes and every test size, 3 seeds: max |error| 1.4e-3 on out
# (default sizes), 1.6e-3 on lse (HS = 4); the largest |error| / (atol + rtol |ref|) is 0.43
# with the tolerance below, which sits near the worst-case bound on out.
tolerance = { atol = 3e-3, rtol = 3e-3 }

# HS a multiple of 4: 16-byte cp.async rows and 8-byte output stores; other head sizes load and
# store element by element. HSP (the head zero-padded in shared memory) = 64 or 128.
[[launch]]
kernel = "attention_forward7_hs64"
when = "HS % 4 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 64 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs128"
when = "HS % 4 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 128 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs64_any"
when = "HS % 4 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 64 + 8 + 4)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward7_hs128_any"
when = "HS % 4 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "4 * 2 * 64 * (2 * 128 + 8 + 4)"
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

// ---- end attention_mma.cuh ----  // load_tile, for_each_copied, tile_ready, mask_causal, online_softmax, store_rows
// (already included: mma.cuh)            // mma_tf32_1688, to_tf32, cp.async; fragment layouts

#define BR 64        // query rows per block: 4 warps x 16
#define BC 64        // keys per tile
#define THREADS 128

// Fragment map (g = lane / 4, t = lane % 4; m16n8k8 TF32 layouts in mma.cuh: A[g][t], A[g+8][t],
// A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]; C (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)).
// k renumbered within each 8-wide step kk: A column / B row t <-> index 8 kk + 2t,
// t + 4 <-> 8 kk + 2t + 1.
// S = Q K^T, k = channels: a = { Q[g][c], Q[g+8][c], Q[g][c+1], Q[g+8][c+1] } with c = 8 kk + 2t;
//   for keys 8j..8j+7 (n-tile j): b = { K[8j+g][c], K[8j+g][c+1] }: one float2.
// P V, k = keys of step kk: a = { P[g][k], P[g+8][k], P[g][k+1], P[g+8][k+1] } with k = 8 kk + 2t,
//   which are S's accumulators s[kk][0], s[kk][2], s[kk][1], s[kk][3];
//   for channels 8n..8n+7: b = { V[k][8n+g], V[k+1][8n+g] }.
template <int HSP, bool ASYNC>
__device__ __forceinline__ void attention_forward7_body(float* out, float* lse, const float* qkv, int T, int NH,
                                                        int HS, float sl) {
    constexpr int KS = HSP + 8;  // K row stride in floats: 8 mod 32 (conflict-free 8-byte loads)
    constexpr int VS = HSP + 4;  // V row stride in floats: 4 mod 32
    constexpr int KT = HSP / 8;  // k-steps of Q K^T
    constexpr int NT = BC / 8;   // 8-key n-tiles of S (and k-steps of P V)
    constexpr int DT = HSP / 8;  // 8-channel n-tiles of O
    extern __shared__ float4 smem4[];
    float* Ks = reinterpret_cast<float*>(smem4);  // two buffers of BC rows
    float* Vs = Ks + 2 * BC * KS;                 // two buffers of BC rows

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // longest query tiles first
    const int row0 = q0 + 16 * warp;                    // this warp's first query row
    const int C = NH * HS;
    const int rs = 3 * C;                               // qkv row stride
    const float* base = head_rows(qkv, 0, T, NH, HS);     // q of row 0 of this block's head
    const int tiles = q0 / BC + 1;                      // key tiles 0 .. the diagonal one (BC == BR)

    load_tile<float, BC, HSP, KS, THREADS, ASYNC>(Ks, base + C, rs, T, HS);
    load_tile<float, BC, HSP, VS, THREADS, ASYNC>(Vs, base + 2 * C, rs, T, HS);
    cp_async_commit();

    // Q's fragments straight from global memory (once per block, while K/V tile 0 is in flight);
    // zeros past T and past HS.
    uint32_t qf[KT][4];
    {
        const float* q_lo = base + (size_t)min(row0 + g, T - 1) * rs;      // row g (clamped: valid address)
        const float* q_hi = base + (size_t)min(row0 + g + 8, T - 1) * rs;  // row g + 8
        const bool lo_ok = row0 + g < T, hi_ok = row0 + g + 8 < T;
#pragma unroll
        for (int kk = 0; kk < KT; kk++) {
            const int c = 8 * kk + 2 * t;
            qf[kk][0] = to_tf32(lo_ok && c < HS ? q_lo[c] : 0.0f);
            qf[kk][1] = to_tf32(hi_ok && c < HS ? q_hi[c] : 0.0f);
            qf[kk][2] = to_tf32(lo_ok && c + 1 < HS ? q_lo[c + 1] : 0.0f);
            qf[kk][3] = to_tf32(hi_ok && c + 1 < HS ? q_hi[c + 1] : 0.0f);
        }
    }

    float o[DT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < DT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int j = 0; j < tiles; j++) {
        const int k0 = j * BC;
        tile_ready(j, tiles, [&] {  // prefetch tile j + 1 into the other buffer
            const float* next = head_rows(qkv, k0 + BC, T, NH, HS);
            const int nb = (j + 1) % 2 * BC;
            load_tile<float, BC, HSP, KS, THREADS, ASYNC>(Ks + nb * KS, next + C, rs, T - k0 - BC, HS);
            load_tile<float, BC, HSP, VS, THREADS, ASYNC>(Vs + nb * VS, next + 2 * C, rs, T - k0 - BC, HS);
        }, [&] {  // round tile j to tf32 once, in place: each thread the elements it copied
            const auto round = [](float& x) { x = __uint_as_float(to_tf32(x)); };
            for_each_copied<float, BC, HSP, KS, THREADS, ASYNC>(Ks + j % 2 * BC * KS, round);
            for_each_copied<float, BC, HSP, VS, THREADS, ASYNC>(Vs + j % 2 * BC * VS, round);
        });
        // This lane's rows: K row g (+ 8j per n-tile), channel 2t (+ 8kk); V row 2t (+ 8kk), channel g (+ 8n).
        const float* Kc = Ks + j % 2 * BC * KS + g * KS + 2 * t;
        const float* Vc = Vs + j % 2 * BC * VS + 2 * t * VS + g;

        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const float2 kb = *reinterpret_cast<const float2*>(Kc + 8 * n * KS + 8 * kk);  // tf32 already
                mma_tf32_1688(s[n], qf[kk], __float_as_uint(kb.x), __float_as_uint(kb.y));
            }
        if (k0 == q0) mask_causal(s, k0, row0);  // the diagonal tile: keys past the row
        online_softmax(s, o, m, l, sl);

#pragma unroll
        for (int kk = 0; kk < NT; kk++) {
            const uint32_t pa[4] = {to_tf32(s[kk][0]), to_tf32(s[kk][2]), to_tf32(s[kk][1]), to_tf32(s[kk][3])};
#pragma unroll
            for (int n = 0; n < DT; n++)
                mma_tf32_1688(o[n], pa, __float_as_uint(Vc[8 * kk * VS + 8 * n]), __float_as_uint(Vc[(8 * kk + 1) * VS + 8 * n]));
        }
        __syncthreads();  // everyone is done with buffer j % 2 before iteration j + 1 refills it
    }

    store_rows<ASYNC>(out, lse, o, m, l, sl, row0, T, NH, HS);
}

// Blocks per SM: shared memory allows 3 (70 KB each) for HSP = 64 and 1 (134 KB) for HSP = 128;
// the register budget is set to match.
#define ENTRY(name, HSP, ASYNC, MIN_BLOCKS)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)                              \
    name(float* out, float* lse, const float* qkv, int T, int NH, int HS, float sl) {               \
        attention_forward7_body<HSP, ASYNC>(out, lse, qkv, T, NH, HS, sl);                          \
    }
ENTRY(attention_forward7_hs64, 64, true, 3)
ENTRY(attention_forward7_hs128, 128, true, 1)
ENTRY(attention_forward7_hs64_any, 64, false, 3)
ENTRY(attention_forward7_hs128_any, 128, false, 1)
