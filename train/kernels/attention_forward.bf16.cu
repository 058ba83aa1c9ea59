/*
title = "bf16 wgmma flash attention: the TMA's tiles, the block's first tile copied while the tensor maps are acquired"
builds_on = 16
precision = "bf16"
changed = """
Version 16 with the block's start as version 15's: the warpgroup's own cp.async copies bring Q and
the first K/V tile, and while they are in flight thread 0 initialises the mbarriers, acquires the
tensor maps and asks the TMA for tile 1. From tile 1 on, the tiles come from the TMA as in 16
(tile j, j >= 1, completes phase (j - 1) / 2 of buffer j % 2's mbarrier). Every block pays
the acquire (a fence that waits for memory) and the TMA's first read of each map's descriptor
before its first copy; in 16 both lay on the path to its first product, here under Q and tile 0's
copies.
"""
why = """
Session 19, on the H100, B = 16, T = 1024, NH = 12 (L2 flushed; cuDNN = version 9 in the same
call): version 16 took 96.7-97.6 us against 15's 93.3-93.9 and cuDNN's 87.4-88.3, although Nsight
Compute at base clocks had it at cuDNN's time (105.2 us against 105.0; 15: 110.3). A block of 16
lasts ~24 us and 1,536 of them run four to a slot. Timed side by side (call 3): 16 without the
acquire (a diagnostic only: the maps are written by the host, and the acquire is what orders them
for the TMA) 87.3-88.2 us; this version 89.3-89.5; 15 93.5-93.6; cuDNN 88.1-88.3. So the
cost was the block's start, not the copies themselves.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma and the TMA: a Hopper; elsewhere the workbench refuses it

[[launch]]
kernel = "attention_forward17"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "1024 + 64 * 128 + 2 * 2 * 128 * 128 + 16"
args = ["out", "lse", "tma:qkv, B * T, 3 * C, 64, 64", "tma:qkv, B * T, 3 * C, 128, 64", "qkv", "T", "NH",
        "1.4426950408889634 / sqrt(HS)"]
*/
// ---- begin attention_fwd_mma.cuh ----
// attention_fwd_mma.cuh: the warp-level pieces of a bf16 flash-attention forward in which a warp
// owns MT m-tiles of 16 query rows (MT = 1 or 2) and every K / V fragment fetched with ldmatrix
// feeds MT mma instructions; and the P V product can lag the scores by one key tile.
//
// Shared so that a later forward (another tile shape, or the backward's recomputation of P) can
// reuse the fragment maps; attention_forward 10 is their first user. The instructions and their
// fragment layouts are in mma.cuh; the maps below are version 8's (attention_forward
// 8_flash_mma_bf16.cu tells them element by element), generalised to MT m-tiles. No inline PTX
// but mma.cuh's wrappers (and no blockIdx), so the CPU emulator (tests/gpu_emu) runs it as is.
//
// Layouts (g = lane / 4, t = lane % 4):
//   s[mt][n][e]  score of row row0 + 16 mt + g + 8 (e / 2) and key key0 + 8 n + 2 t + (e % 2),
//                for NT = 8 n-tiles of 8 keys (a 64-key tile).
//   o[mt][n][e]  output of the same row and channel 8 n + 2 t + (e % 2), DT = HSP / 8 n-tiles.
//   p[mt][kk][4] the probabilities of keys 16 kk .. 16 kk + 15 as P V's A fragment, bf16 pairs:
//                { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] }.
//   m[mt][r], l[mt][r]  row r (0: g, 1: g + 8) of m-tile mt: the softmax's reference point (a
//                past running maximum, see softmax_tile), kept already scaled (score x sl,
//                sl = log2(e) / sqrt(HS)), and this lane's share of the row sum of 2^(s sl - m).
// Shared-memory tiles: rows of S = HSP + 8 bf16 (HSP + 16 bytes: a 16-mod-128-byte stride, so the
// 8 row addresses of one ldmatrix matrix fall in 8 different 16-byte bank groups).
//
// stage_rows<ROWS, HSP, S, THREADS, ASYNC>(dst, src, row_stride, rows_left, HS)
//   dst[r * S + d] = src[r * row_stride + d] for r < ROWS, d < HSP, zeros where r >= rows_left or
//   d >= HS (zero keys score 0 and zero values add nothing; never NaN). ASYNC: 16-byte cp.async
//   (zero-filled, no read, where invalid; the caller commits and waits), needs HS % 8 == 0 and
//   16-byte aligned rows. Else element by element, synchronously (any HS).
// TilePieces<HSP, S, THREADS>: the same ASYNC copy of a whole 64-row tile with the thread's part of
//   the addresses computed once (see below).
// k_lane<S>(tile), v_lane<S>(tile): this lane's ldmatrix row address in a K / V tile (shared space).
// q_fragments<MT, KT, S>(qf, q_rows): the warp's Q A-fragments, q_rows = its first Q row in shared.
// qk<MT, KT, S>(s, qf, k): s = Q K^T for one 64-key tile (set, not accumulated).
// q_lane<S>(q_rows), qk_smem<MT, KT, S>(s, q, k): the same product with the Q fragments read from
//   shared memory (q = q_lane of the warp's first Q row), one 16-channel step at a time: 8
//   registers for Q instead of 32 (MT = 2), MT ldmatrix more per step.
// mask_causal<MT>(s, key0, row0): s = -inf where key > row.
// softmax_tile<MT>(s, p, m, l, alpha, sl, slack): folds the tile into m and l; p = 2^(s sl - m_new)
//   packed to bf16; alpha = 2^(m_old - m_new), by which the caller must rescale o (after adding
//   any P V computed against m_old). m is a reference point, not always the maximum: it moves (to
//   the running maximum) only when a tile's maximum exceeds it by more than slack (0: on every
//   increase), so p <= 2^slack. Returns whether any of this lane's rows moved (alpha != 1): if
//   none did, o needs no rescaling. s is consumed. The final out = o / l and
//   lse = m + log2(l) are exact for any reference point.
// pv<MT, DT, S>(o, p, v): o += P V for one 64-key tile.
// rescale<MT, DT>(o, alpha): o *= alpha, row by row.
// store_rows<MT, PAIRS>(out, lse, o, m, l, row0, b, h, T, NH, HS): the epilogue: the row sums over
//   the 4 lanes, lse = ln sum exp(score / sqrt(HS)) (fp32, lane t == 0), out = o / sum (bf16;
//   PAIRS: two channels in one 4-byte store, needs HS even). Rows >= T are skipped. All 32 lanes
//   must call (shuffles).

#ifndef KERNELS_COMMON_ATTENTION_FWD_MMA_CUH
#define KERNELS_COMMON_ATTENTION_FWD_MMA_CUH

#include <stdint.h>
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
// ---- cp.async (cp_async_16, cp_async_4, cp_async_commit, cp_async_wait<N>) --------------------
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

// cp_async_4(dst, src, valid): the same for 4 bytes (.ca: cached in L1; 16 is the only size .cg
// takes), 4-byte aligned addresses. The backward kernels stage each row's log-sum-exp this way.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

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

template <int ROWS, int HSP, int S, int THREADS, bool ASYNC>
__device__ __forceinline__ void stage_rows(bf16* dst, const bf16* src, int row_stride, int rows_left, int HS) {
    if constexpr (ASYNC) {
        constexpr int PER_ROW = HSP / 8;                 // 16-byte pieces per row
        constexpr int ROWS_PER_PASS = THREADS / PER_ROW;
        static_assert(THREADS % PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0, "whole rows, whole passes");
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        const uint32_t to = smem_addr(dst + r0 * S + d);
        // A piece past HS reads nothing (zero-fill), but its address must still lie inside the
        // tensor: it names the row's last real piece instead.
        const bf16* from = src + (size_t)r0 * row_stride + min(d, HS - 8);
        if (rows_left >= ROWS) {  // a whole tile (uniform): no row tests, one add per piece
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++)
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride, d < HS);
        } else {
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++) {
                const bool valid = r0 + k * ROWS_PER_PASS < rows_left && d < HS;
                const bf16* piece = valid ? from + (size_t)k * ROWS_PER_PASS * row_stride : src;
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, piece, valid);
            }
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, d = i % HSP;
            dst[r * S + d] = r < rows_left && d < HS ? src[(size_t)r * row_stride + d] : to_bf16(0.0f);
        }
    }
}

// TilePieces<HSP, S, THREADS>(head, row_stride, HS): a thread's share of stage_rows' ASYNC copy of a
// whole 64-row tile, with the per-thread part of the addresses computed once: src = the thread's
// first piece in row 0 of `head` (add the tile's offset), copy(dst, src, row_stride) issues its
// four (HSP = 64) or eight (128) 16-byte copies into the tile at shared address dst. Pieces past
// HS are zero-filled from an in-bounds address, as in stage_rows.
template <int HSP, int S, int THREADS>
struct TilePieces {
    static constexpr int PER_ROW = HSP / 8, ROWS_PER_PASS = THREADS / PER_ROW, PASSES = 64 / ROWS_PER_PASS;
    const bf16* src;
    uint32_t offset;  // the thread's first piece in a shared tile, bytes
    bool valid;
    __device__ __forceinline__ TilePieces(const bf16* head, int row_stride, int HS) {
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        src = head + (size_t)r0 * row_stride + min(d, HS - 8);
        offset = (r0 * S + d) * 2;
        valid = d < HS;
    }
    __device__ __forceinline__ void copy(uint32_t dst, const bf16* from, int row_stride) const {
#pragma unroll
        for (int k = 0; k < PASSES; k++)
            cp_async_16(dst + offset + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride,
                        valid);
    }
};

// K: lane l gives key (l % 8) + 8 (l / 16), channel 8 ((l / 8) % 2): the matrices are the b0, b1 of
// n-tile 2p and the b0, b1 of n-tile 2p + 1. V (.trans): key l % 16, channel 8 (l / 16): the b0, b1
// of channel n-tile 2n, then of 2n + 1. Byte offsets of a 16-key / 16-channel step are constants.
template <int S>
__device__ __forceinline__ uint32_t k_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 8 + 8 * (lane / 16)) * S + 8 * (lane / 8 % 2));
}

template <int S>
__device__ __forceinline__ uint32_t v_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 16) * S + 8 * (lane / 16));
}

template <int S>
__device__ __forceinline__ uint32_t q_lane(const bf16* q_rows) {
    const int lane = threadIdx.x % 32;
    return smem_addr(q_rows + (lane % 16) * S + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void q_fragments(uint32_t (&qf)[MT][KT][4], const bf16* q_rows) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
            ldmatrix_x4(qf[mt][kk], q_rows + (16 * mt + lane % 16) * S + 16 * kk + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void qk(float (&s)[MT][8][4], const uint32_t (&qf)[MT][KT][4], uint32_t k) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k + (16 * p * S + 16 * kk) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {  // one fragment, MT mma: the point of MT = 2
                mma_bf16_16816(s[mt][2 * p], qf[mt][kk], kb[0], kb[1]);
                mma_bf16_16816(s[mt][2 * p + 1], qf[mt][kk], kb[2], kb[3]);
            }
        }
}

template <int MT, int KT, int S>
__device__ __forceinline__ void qk_smem(float (&s)[MT][8][4], uint32_t q, uint32_t k) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++) {
        uint32_t qf[MT][4];  // this 16-channel step's Q fragments only: 8 registers at MT = 2
#pragma unroll
        for (int mt = 0; mt < MT; mt++) ldmatrix_x4(qf[mt], q + (16 * mt * S + 16 * kk) * 2);
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k + (16 * p * S + 16 * kk) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16_16816(s[mt][2 * p], qf[mt], kb[0], kb[1]);
                mma_bf16_16816(s[mt][2 * p + 1], qf[mt], kb[2], kb[3]);
            }
        }
    }
}

template <int MT>
__device__ __forceinline__ void mask_causal(float (&s)[MT][8][4], int key0, int row0) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int d = key0 + 2 * t - row0 - g;  // key - row for mt = 0, n = 0, e = 0
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + 8 * n + (e & 1) - 16 * mt - 8 * (e >> 1) > 0) s[mt][n][e] = -INFINITY;
}

template <int MT>
__device__ __forceinline__ bool softmax_tile(float (&s)[MT][8][4], uint32_t (&p)[MT][4][4], float (&m)[MT][2],
                                             float (&l)[MT][2], float (&alpha)[MT][2], float sl, float slack) {
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float a = fmaxf(s[mt][0][2 * r], s[mt][0][2 * r + 1]), b = fmaxf(s[mt][1][2 * r], s[mt][1][2 * r + 1]);
#pragma unroll
            for (int n = 2; n < 8; n += 2) {  // two chains: half the dependent latency
                a = fmaxf(a, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                b = fmaxf(b, fmaxf(s[mt][n + 1][2 * r], s[mt][n + 1][2 * r + 1]));
            }
            // The reference point m moves only when the tile's maximum passes it by more than
            // slack: until then p <= 2^slack, harmless in fp32 sums and bf16 P (the same relative
            // rounding at any magnitude), and o needs no rescaling. Every row's first tile holds
            // key 0, which no mask removes: after it m is finite, and s sl - m never inf - inf.
            const float mx = warp_max<4>(fmaxf(a, b)) * sl;
            const bool up = mx > m[mt][r] + slack;  // always on the first tile (m = -inf)
            const float mn = up ? mx : m[mt][r];
            alpha[mt][r] = exp2f(m[mt][r] - mn);  // 1 if m stays; 0 on the first tile
            m[mt][r] = mn;
            grew |= up;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int n = 0; n < 8; n++) {  // one FFMA and one MUFU.EX2 a score
                s[mt][n][2 * r] = exp2f(fmaf(s[mt][n][2 * r], sl, -mn));
                s[mt][n][2 * r + 1] = exp2f(fmaf(s[mt][n][2 * r + 1], sl, -mn));
                sa += s[mt][n][2 * r];
                sb += s[mt][n][2 * r + 1];
            }
            l[mt][r] = fmaf(l[mt][r], alpha[mt][r], sa + sb);
        }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            p[mt][kk][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][kk][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][kk][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][kk][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
    return grew;
}

template <int MT, int DT, int S>
__device__ __forceinline__ void pv(float (&o)[MT][DT][4], const uint32_t (&p)[MT][4][4], uint32_t v) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v + (16 * kk * S + 16 * n) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16_16816(o[mt][2 * n], p[mt][kk], vb[0], vb[1]);
                mma_bf16_16816(o[mt][2 * n + 1], p[mt][kk], vb[2], vb[3]);
            }
        }
}

template <int MT, int DT>
__device__ __forceinline__ void rescale(float (&o)[MT][DT][4], const float (&alpha)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < DT; n++) {
            o[mt][n][0] *= alpha[mt][0];
            o[mt][n][1] *= alpha[mt][0];
            o[mt][n][2] *= alpha[mt][1];
            o[mt][n][3] *= alpha[mt][1];
        }
}

template <int MT, bool PAIRS, int DT>
__device__ __forceinline__ void store_rows(bf16* out, float* lse, const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], int row0, int b, int h, int T, int NH, int HS) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int C = NH * HS;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 16 * mt + g + 8 * r;
            const float sum = warp_sum<4>(l[mt][r]);  // every lane: shuffles before the row test
            if (row >= T) continue;
            const float inv = 1.0f / sum;
            if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m[mt][r] + log2f(sum)) * 0.6931471805599453f;
            bf16* dst = out + ((size_t)b * T + row) * C + (size_t)h * HS;
#pragma unroll
            for (int n = 0; n < DT; n++) {
                const int d = 8 * n + 2 * t;
                const float x = o[mt][n][2 * r] * inv, y = o[mt][n][2 * r + 1] * inv;
                if (PAIRS) {  // HS even: d < HS covers d + 1
                    if (d < HS) *reinterpret_cast<uint32_t*>(dst + d) = pack_bf16x2(x, y);
                } else {
                    if (d < HS) dst[d] = to_bf16(x);
                    if (d + 1 < HS) dst[d + 1] = to_bf16(y);
                }
            }
        }
}

#endif  // KERNELS_COMMON_ATTENTION_FWD_MMA_CUH

// ---- end attention_fwd_mma.cuh ----  // store_rows (version 11's)
// (already included: bf16.cuh)
// ---- begin gemm_wgmma.cuh ----
// gemm_wgmma.cuh: the main loop of a Hopper GEMM (sm_90a) with a fused epilogue of the caller's:
// TMA copies into a ring of shared-memory stages, wgmma with 64 x BN x 16 instructions, one
// producer warp and two consumer warpgroups; optionally two blocks a cluster sharing B's tiles,
// tiles in groups of row blocks, or each warpgroup on whole tiles of its own (ping-pong).
// matmul_forward_gelu 7-12 and matmul_forward 9-10 are built on it (10-12 and 9-10 through
// gemm_tma.cuh, which also holds the TMA stores' side: tma_store_2d, bulk_commit, bulk_wait*).
//
// D (M x N, row-major) = A (M x K, row-major) B^T, B given as N x K row-major (a Linear layer's
// weight): both operands "K-major", the k index running along their rows, as wgmma.cuh's Q and K.
//
// ---- The block ----------------------------------------------------------------------------
// 384 threads, one block an SM, persistent: block b takes output tiles b, b + gridDim.x, ... of
// BM = 128 rows by BN columns (tile t is row block t / tiles_n, column block t % tiles_n: the blocks
// in flight share B's columns and a few of A's rows in L2); in pairs with CLUSTER = 2 (below).
// * Warpgroup 0 is the producer: its thread 0 alone works. For each tile and each k-step of 64 it
//   waits for a free stage, then asks the TMA for A's 128 x 64 and B's BN x 64 boxes into it. The
//   TMA writes them in the 128-byte-swizzled layout that wgmma.cuh describes (given 1024-byte
//   aligned stages), fills what lies past M, N or K with zeros, and completes the stage's `full`
//   barrier when the bytes have landed. The producer runs ahead of the consumers by up to STAGES
//   k-steps, across tiles too: while they run a tile's epilogue, the next tile's loads proceed.
// * Warpgroups 1 and 2 are the consumers: warpgroup 1 + w computes rows 64 w .. 64 w + 63 of the
//   tile, an accumulator of BN / 2 floats a thread (wgmma's D layout, below). A k-step is four
//   wgmma (k = 16 each) on the stage, one commit; the stage is handed back (its `empty` barrier,
//   one arrival per consumer warp) once the next k-step's group is issued and this one has
//   completed (wgmma_wait<1>), so the tensor cores always have a group queued.
// * GemmRing<BN, STAGES, CLUSTER, GROUP, PINGPONG>: GROUP > 1 orders the tiles in groups of GROUP
//   row blocks, each group column block by column block (origin), so that a B larger than L2 (the
//   lm head's 77 MB weight) is read from memory once a group, not once a row block. PINGPONG gives
//   each consumer warpgroup whole tiles (consume_tile: two 64-row halves), the block's tiles in
//   turn, so one's epilogue runs under the other's products; the two take turns at the ring
//   (consume_tile says why they must) and a stage is released by one warpgroup's 4 warps.
//
// ---- The accumulator (per consumer thread: warp q of its warpgroup, g = lane / 4, t = lane % 4)
// d[4 j + e] = D[64 w + 16 q + g + 8 (e / 2)][8 j + 2 t + (e % 2)], j = 0 .. BN / 8 - 1: wgmma.cuh's
// 64 x 64 layout continued to BN columns. Each thread holds two rows' pairs of adjacent columns.
//
// ---- The tensor maps (workbench/tensor_maps.py) -------------------------------------------
// The kernel receives pointers to A's and B's maps in device memory (the header's "tma:" args):
// each describes a row-major bf16 matrix (rows x cols, cols % 8 == 0), a box of rows x 64
// elements, 128-byte swizzle, zero fill. A's box is 128 rows, B's BN. The host wrote them with
// ordinary copies, so the producer acquires them for the TMA's own path (tensormap_acquire)
// before its first copy.

#ifndef KERNELS_COMMON_GEMM_WGMMA_CUH
#define KERNELS_COMMON_GEMM_WGMMA_CUH

#include <stdint.h>
// ---- begin mbarrier.cuh ----
// mbarrier.cuh: shared-memory barriers (mbarriers, sm_90) between the warps that fill a buffer
// and those that read it: attention_forward 13-15's producer warps, and the TMA GEMMs
// (common/gemm_wgmma.cuh), whose copies complete a barrier's phase themselves.
//
// An mbarrier is a 64-bit object in shared memory, initialised with the number of arrivals that
// complete its current phase; when they have all arrived the phase completes, its parity bit
// flips and the count starts again. A waiter names the parity of the phase it waits to see
// completed: phase k of a barrier used once per round is waited for with parity k & 1.
//
// mbar_init(bar, count): one thread, before any use, then a __syncthreads.
// mbar_arrive(bar): one arrival of the calling thread.
// mbar_arrive_on_copies(bar): an arrival that happens once every cp.async this thread issued
//   before the call has landed (cp.async.mbarrier.arrive.noinc: it is one of the initialised
//   count, not an extra one); the thread itself does not wait.
// mbar_wait(bar, parity): spins (try_wait) until the phase of that parity has completed; the
//   waiter then sees the memory that the arriving threads wrote before arriving.
// `bar` is the barrier's shared-space address (smem_addr).
//
// mbar_expect_tx(bar, bytes): one arrival that also says `bytes` more are to land by asynchronous
//   copies naming this barrier (TMA: cp.async.bulk.tensor ... mbarrier::complete_tx); the phase
//   completes when every arrival has come and every announced byte has landed.
// mbar_init_fence(): after the barriers' mbar_init, before the __syncthreads that publishes them,
//   so that the asynchronous copies (another proxy) see them initialised.

#ifndef KERNELS_COMMON_MBARRIER_CUH
#define KERNELS_COMMON_MBARRIER_CUH

#include <stdint.h>

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

#endif  // KERNELS_COMMON_MBARRIER_CUH

// ---- end mbarrier.cuh ----
// ---- begin wgmma.cuh ----
// wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only) for 64 x 64 x 16 bf16 products
// with fp32 accumulators, the shared-memory layout it reads (rows of 128 bytes, 128-byte swizzle)
// and the matrix descriptors that describe that layout to it. attention_forward 12-14 and
// attention_backward 12 and 13 use it.
//
// ---- What changes from mma.sync ------------------------------------------------------------
// mma.sync (mma.cuh) is a warp's instruction: 16 x 8 x 16, both operands in registers, each
// fetched from shared memory by ldmatrix first. wgmma is a warpgroup's (4 consecutive warps, 128
// threads, the first warp's index a multiple of 4): 64 x N x 16 in one instruction, B read by
// the tensor cores straight from shared memory, A from shared memory or from registers. It is
// asynchronous: it returns at once, and the accumulators may be read only after
//     wgmma_commit();      // closes a group of the wgmma issued so far by this warpgroup
//     wgmma_wait<N>();     // waits until at most N groups are still in flight
// and before a wgmma uses registers that ordinary instructions wrote (accumulators rescaled, an A
// fragment packed) the warpgroup issues wgmma_fence(). Shared memory written by ordinary stores or
// cp.async must be made visible to the tensor cores' own path (the "async proxy") by
// fence_proxy_async() in each writing thread, before the barrier that precedes the wgmma.
//
// ---- Fragments (per warp w of the warpgroup, g = lane / 4, t = lane % 4) ---------------------
// D (64 x 64 fp32): d[n][e] = D[16 w + g + 8 (e / 2)][8 n + 2 t + (e % 2)], n = 0..7: the warp's
//   16 rows, laid out exactly like eight mma.sync m16n8 accumulators side by side.
// A in registers (64 x 16 bf16): a[0..3] as mma.sync's m16n8k16 A fragment of the warp's 16 rows
//   (mma.cuh): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] =
//   A[g+8][2t+8, 2t+9]. So an accumulator of keys 16 kk .. 16 kk + 15 packed to bf16 pairs
//   ({d[2kk][0,1]}, {d[2kk][2,3]}, {d[2kk+1][0,1]}, {d[2kk+1][2,3]}) is the A fragment of a k-step
//   of the next product: flash attention's P never leaves registers.
//
// ---- The shared-memory tiles ----------------------------------------------------------------
// A tile is rows of 64 bf16 (128 bytes), starting on a 1024-byte boundary. The 16-byte chunk c
// (elements 8c .. 8c + 7) of row r sits at byte r * 128 + 16 (c ^ (r % 8)): sw128(r, c). The XOR
// (the "128-byte swizzle") puts the same chunk of 8 consecutive rows in 8 different bank groups,
// which is what the tensor cores' reads need, and is the pattern the descriptor names (mode 1).
// Each operand is described by its major-ness, the dimension along which its 128-byte rows run:
// * K-major (the product's k index runs along the row): Q and K in S = Q K^T (k = the channel).
//   Rows r are the m (or n) index; 8-row groups 1024 bytes apart (the stride "SBO"). A k-step of
//   16 is 32 bytes further along the row: its descriptor is the tile's plus 32 bytes.
// * MN-major (the n index runs along the row): V in O = P V (k = the key, n = the channel), V's
//   rows as they come from memory. Rows r are the k index; 8-row groups 1024 bytes apart (SBO
//   again); with 64 channels the row is one swizzle width, so the leading offset is unused. A
//   k-step of 16 keys is 16 rows, 2048 bytes further.
//   The instruction's trans-b flag (1) says B is MN-major.
//
// sw128_desc(addr, sbo): the 64-bit descriptor: bits 0-13 the shared address / 16, 16-29 the
// leading byte offset / 16 (1: unused with this swizzle here), 32-45 the stride byte offset / 16,
// 62-63 the swizzle mode (1 = 128-byte). Base offset (bits 49-51) 0: tiles start 1024-aligned.
//
// wgmma_ss(d, da, db, accumulate): d (+)= A B^T-style product with A (64 x 16, K-major) and B
//   (64 x 16 as n x k, K-major) both in shared memory; accumulate = false overwrites d.
// wgmma_rs_bt(d, a, db, accumulate = true): d (+)= A B with A in registers and B (16 x 64 as k x n)
//   MN-major in shared memory; accumulate = false overwrites d.

#ifndef KERNELS_ATTENTION_FORWARD_WGMMA_CUH
#define KERNELS_ATTENTION_FORWARD_WGMMA_CUH

#include <stdint.h>
// (already included: mma.cuh)  // cp_async_16

__device__ __forceinline__ uint32_t sw128(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

// stage_sw128<ROWS, THREADS>(dst, src, rs, valid, any): ROWS rows of 64 bf16 (row r at src + r * rs)
// copied by cp.async into the swizzled tile at shared address dst by THREADS threads (the caller
// commits and waits); rows at or past `valid` are zero-filled, their source `any` (not read).
template <int ROWS, int THREADS>
__device__ __forceinline__ void stage_sw128(uint32_t dst, const bf16* src, size_t rs, int valid, const bf16* any) {
    static_assert(ROWS * 8 % THREADS == 0, "whole passes");
#pragma unroll
    for (int k = 0; k < ROWS * 8 / THREADS; k++) {
        const int i = threadIdx.x + THREADS * k, r = i / 8, c = i % 8;
        const bool ok = r < valid;
        cp_async_16(dst + sw128(r, c), ok ? src + (size_t)r * rs + 8 * c : any, ok);
    }
}

__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WGMMA_D32                                                                                          \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_D32_OPERANDS(d)                                                                            \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
    "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
    "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
    "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32 ", %32, %33, acc, 1, 1, 0, 0;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "l"(da), "l"(db), "r"((int)accumulate));
}

__device__ __forceinline__ void wgmma_rs_bt(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db,
                                            bool accumulate = true) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32
        ", {%32, %33, %34, %35}, %36, acc, 1, 1, 1;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((int)accumulate));
}
#undef WGMMA_D32
#undef WGMMA_D32_OPERANDS
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_ATTENTION_FORWARD_WGMMA_CUH

// ---- end wgmma.cuh ----  // sw128_desc, wgmma_fence / commit / wait

// CUtensorMap's storage: 128 opaque bytes, 64-byte aligned (cuda.h's CUtensorMap, without cuda.h).
struct alignas(64) TmaMap {
    unsigned long long opaque[16];
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void tensormap_acquire(const TmaMap* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
                 : "memory");
}

// tma_load_2d(dst, map, c0, c1, bar): the box whose first element is (column c0, row c1) of the
// map's matrix, into shared memory at dst; completes `bar`'s announced bytes.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// tma_store_2d(map, c0, c1, src): the box at shared address src (the map's swizzled layout, 1024-byte
// aligned) written to the map's matrix at (column c0, row c1); what lies past the matrix's edges is
// not written. Asynchronous: it joins this thread's current bulk group (bulk_commit closes it).
// The threads that wrote src must each fence_proxy_async() (wgmma.cuh) before the barrier that
// precedes the store, so the copy engine reads what they wrote.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups, all but the newest N: done reading their shared memory (the source
// may be written again), or done altogether (bulk_wait: their writes are performed).
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }

#define GEMM_D64                                                                                           \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GEMM_D96                                                                                           \
    GEMM_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "           \
             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GEMM_D128                                                                                 \
    GEMM_D96 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GEMM_F8(i)                                                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define GEMM_F64 GEMM_F8(0), GEMM_F8(8), GEMM_F8(16), GEMM_F8(24), GEMM_F8(32), GEMM_F8(40), GEMM_F8(48), GEMM_F8(56)
#define GEMM_F96 GEMM_F64, GEMM_F8(64), GEMM_F8(72), GEMM_F8(80), GEMM_F8(88)
#define GEMM_F128 GEMM_F96, GEMM_F8(96), GEMM_F8(104), GEMM_F8(112), GEMM_F8(120)

// wgmma_wide<BN>(d, da, db, accumulate): d (+)= A (64 x 16) B^T (B: BN x 16), both K-major in
// shared memory (sw128_desc descriptors); accumulate = false overwrites d. BN = 128, 192 or 256.
template <int BN>
__device__ __forceinline__ void wgmma_wide(float (&d)[BN / 2], uint64_t da, uint64_t db, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_wide<128>(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" GEMM_D64 "}, %64, %65, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F64
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<192>(float (&d)[96], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" GEMM_D96 "}, %96, %97, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F96
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<256>(float (&d)[128], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" GEMM_D128 "}, %128, %129, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F128
        : "l"(da), "l"(db), "r"((int)accumulate));
}
#undef GEMM_D128
#undef GEMM_D96
#undef GEMM_D64
#undef GEMM_F8
#undef GEMM_F96
#undef GEMM_F64
#undef GEMM_F128

// Warpgroup register budgets (sm_90a; the kernel needs a register cap at entry, e.g.
// __launch_bounds__(384, 1)): every thread of the warpgroup executes it, the count a multiple of 8.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }

// ---- Two blocks a cluster (CLUSTER = 2) --------------------------------------------------
// The two blocks of a cluster take vertically adjacent tiles (row blocks 2 i and 2 i + 1, one
// column block), so they need the same B tile. Each block's producer loads half of it (BN / 2
// rows, its rank's half: B's map has a box of BN / 2 rows) and the TMA writes that half into both
// blocks' shared memory (multicast) and completes both blocks' `full` barrier for those bytes: L2
// serves B once for two tiles. A stage may then be refilled only when both blocks' consumers are
// done with it, since either producer writes into both: each consumer warp arrives on the `empty`
// barrier of its own block and of the other (16 arrivals a phase), and the producers wait on it
// with cluster scope. The blocks meet at a cluster barrier after initialising their barriers
// (before either can signal the other's) and again at the end (before either leaves while the
// other may still write to it).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t blocks) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(blocks)
        : "memory");
}
// One arrival on the barrier at the same shared address in the cluster's block `rank`.
__device__ __forceinline__ void mbar_arrive_in(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// The shared memory of a GemmRing: STAGES stages of A (128 x 64) then B (BN x 64), each
// 1024-aligned, then a full and an empty barrier a stage (and, with PINGPONG, the two turns): a
// launch asks for 1024 (slack for the alignment) + STAGES * STAGE + 16 * STAGES (+ 16) bytes, then
// the kernel's own, from end().
//
// The tiles: with T = cdiv(cdiv(M, 128), CLUSTER) * cdiv(N, BN) tile slots (count), block b's
// slots are p = b / CLUSTER, + gridDim.x / CLUSTER, ...; slot p's tile (origin) is row block
// p / tiles_n * CLUSTER + the block's rank, column block p % tiles_n. With CLUSTER = 1 a slot is
// a tile; with 2, a slot is a pair of tiles, the second past M where the row blocks are odd (its
// rows are zeros from the TMA and its stores are masked, so the pair's protocol still runs).
template <int BN, int STAGES, int CLUSTER = 1, int GROUP = 1, bool PINGPONG = false>
struct GemmRing {
    static constexpr int BM = 128, BK = 64;
    static constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE = A_BYTES + B_BYTES;
    static_assert(STAGE % 1024 == 0 && (B_BYTES / CLUSTER) % 1024 == 0, "stages (and B's halves) stay 1024-aligned");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "one block, or a pair");
    static_assert(CLUSTER == 1 || (GROUP == 1 && !PINGPONG), "pairs take row-major tiles, both warpgroups each");
    static constexpr int ARRIVALS = PINGPONG ? 4 : 8;  // consumer warps that release a stage (of a block)
    uint32_t base;  // the first stage's shared address
    __device__ __forceinline__ uint32_t a(int s) const { return base + s * STAGE; }
    __device__ __forceinline__ uint32_t b(int s) const { return base + s * STAGE + A_BYTES; }
    __device__ __forceinline__ uint32_t full(int s) const { return base + STAGES * STAGE + 8 * s; }
    __device__ __forceinline__ uint32_t empty(int s) const { return base + STAGES * STAGE + 8 * (STAGES + s); }
    // PINGPONG: the consumer warpgroups' turns (turn(w): warpgroup w may wait on its next tile's stages).
    __device__ __forceinline__ uint32_t turn(int w) const { return base + STAGES * STAGE + 16 * STAGES + 8 * w; }
    // The first byte past the ring (16-aligned): where a kernel's own shared memory may start.
    __device__ __forceinline__ uint32_t end() const { return base + STAGES * STAGE + 16 * STAGES + (PINGPONG ? 16 : 0); }

    static __device__ __forceinline__ int rank() { return CLUSTER == 1 ? 0 : (int)(blockIdx.x % CLUSTER); }
    static __device__ __forceinline__ int first() { return blockIdx.x / CLUSTER; }
    static __device__ __forceinline__ int stride() { return gridDim.x / CLUSTER; }
    static __device__ __forceinline__ int count(int M, int N) {
        return ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER * ((N + BN - 1) / BN);
    }
    static __device__ __forceinline__ void origin(int p, int M, int N, int& row0, int& col0) {
        const int tiles_n = (N + BN - 1) / BN;
        if constexpr (GROUP == 1) {
            row0 = (p / tiles_n * CLUSTER + rank()) * BM;
            col0 = p % tiles_n * BN;
        } else {  // groups of GROUP row blocks, each taken column block by column block
            const int tiles_m = (M + BM - 1) / BM, in_group = GROUP * tiles_n, top = p / in_group * GROUP;
            const int rows = min(GROUP, tiles_m - top), r = p % in_group;
            row0 = (top + r % rows) * BM;
            col0 = r / rows * BN;
        }
    }

    // Thread 0 initialises the barriers; every thread of the block must call this, once.
    __device__ __forceinline__ void init(uint32_t smem) {
        base = (smem + 1023) & ~1023u;
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full(s), 1);             // the producer's mbar_expect_tx
                mbar_init(empty(s), ARRIVALS * CLUSTER);  // one arrival per consumer warp (of the cluster) on it
            }
            if (PINGPONG) {
                mbar_init(turn(0), 1);  // the other warpgroup's first thread
                mbar_init(turn(1), 1);
            }
            mbar_init_fence();
        }
        __syncthreads();
        if (CLUSTER > 1) cluster_sync();
    }
    // Every thread of the block, last (with CLUSTER = 2: the blocks leave together).
    __device__ __forceinline__ void finish() const {
        if (CLUSTER > 1) cluster_sync();
    }

    // The producer (one thread): every k-step of every tile this block takes, in the consumers' order.
    __device__ __forceinline__ void produce(const TmaMap* ma, const TmaMap* mb, int M, int N, int K) {
        const int ksteps = (K + BK - 1) / BK;
        tensormap_acquire(ma);
        tensormap_acquire(mb);
        int it = 0;
        for (int p = first(); p < count(M, N); p += stride()) {
            int row0, col0;
            origin(p, M, N, row0, col0);
            for (int k = 0; k < ksteps; k++, it++) {
                const int s = it % STAGES, parity = ((it / STAGES) & 1) ^ 1;  // a fresh barrier's "previous" phase is done
                if (CLUSTER == 1)
                    mbar_wait(empty(s), parity);
                else
                    mbar_wait_cluster(empty(s), parity);
                mbar_expect_tx(full(s), STAGE);
                tma_load_2d(a(s), ma, k * BK, row0, full(s));
                if (CLUSTER == 1)
                    tma_load_2d(b(s), mb, k * BK, col0, full(s));
                else
                    tma_load_2d_multicast(b(s) + rank() * (B_BYTES / 2), mb, k * BK, col0 + rank() * (BN / 2), full(s),
                                          (uint16_t)3);
            }
        }
    }

    // A consumer warpgroup's product for one tile: d = rows 64 w .. 64 w + 63 of the tile's A B^T.
    // `it` counts the k-steps this block has consumed (the same count as the producer's).
    __device__ __forceinline__ void consume(float (&d)[BN / 2], int w, int K, int& it) const {
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t da = sw128_desc(a(s) + w * 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgmma_wide<BN>(d, da + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            wgmma_commit();
            if (k > 0) {
                wgmma_wait<1>();  // the previous k-step's products are done with its stage
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    // PINGPONG: consumer warpgroup w's product for its n-th tile (rows 0 .. 63 into lo, 64 .. 127
    // into hi), on that tile's stages alone: the block's tiles alternate between its two
    // warpgroups, so each skips the other's k-steps (the caller adds them to `it`).
    // The turns: a stage's `full` barrier tells apart only adjacent phases (parity), and a
    // warpgroup's next stages are a tile's worth of phases ahead of where the other warpgroup is.
    // So warpgroup w waits for its turn before its first wait on a stage (warpgroup 0's first tile
    // needs none), and hands the turn over once it has waited for its tile's last stage: by then
    // every stage has completed the phase before the ones the other warpgroup waits for.
    __device__ __forceinline__ void consume_tile(float (&lo)[BN / 2], float (&hi)[BN / 2], int K, int& it, int w,
                                                 int n) const {
        static_assert(PINGPONG, "a warpgroup a tile");
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        if (w == 1)
            mbar_wait(turn(1), n & 1);  // warpgroup 0 has waited for its n-th tile's stages
        else if (n > 0)
            mbar_wait(turn(0), (n - 1) & 1);  // warpgroup 1 has waited for its (n - 1)-th's
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t dlo = sw128_desc(a(s), 1024), dhi = sw128_desc(a(s) + 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                wgmma_wide<BN>(lo, dlo + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                wgmma_wide<BN>(hi, dhi + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            }
            wgmma_commit();
            if (k == ksteps - 1 && threadIdx.x % 128 == 0) mbar_arrive(turn(1 - w));  // the other's turn
            if (k > 0) {
                wgmma_wait<1>();
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    __device__ __forceinline__ void release(int s) const {
        mbar_arrive(empty(s));
        if (CLUSTER > 1) mbar_arrive_in(empty(s), rank() ^ 1);
    }
};
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_COMMON_GEMM_WGMMA_CUH

// ---- end gemm_wgmma.cuh ----         // TmaMap, tensormap_acquire, tma_load_2d
// (already included: mbarrier.cuh)
// (already included: mma.cuh)                // cp_async_commit / wait, smem_addr
// ---- begin producers.cuh ----
// producers.cuh: the producer warps of attention_forward 13 and 14: their share of a tile's copy.
//
// The mbarriers of their handover to the consumer warpgroups (mbar_init, mbar_arrive,
// mbar_arrive_on_copies, mbar_wait) are in kernels/common/mbarrier.cuh, shared with the GEMMs.
//
// ---- The producers' copy -----------------------------------------------------------------------
// produce_tile<ROWS, PRODUCERS, CONSUMERS>(dst, src, rs, valid, any): the producer threads' (those
//   from CONSUMERS on, PRODUCERS of them, a multiple of 64) share of copying ROWS rows of 64 bf16
//   (row r at src + r * rs) by cp.async into the 128-byte-swizzled tile at shared address dst
//   (wgmma.cuh's layout); rows at or past `valid` are zero-filled (their source `any`, not read).
//   Lane p copies chunk p % 8 of rows p / 8, p / 8 + 8, ...: rows 8 apart share their swizzle
//   (r % 8), so the thread's destination is one address plus k KB, its source one pointer plus k
//   times 8 rows: a cp.async and a row test per chunk, no address arithmetic.

#ifndef KERNELS_ATTENTION_FORWARD_PRODUCERS_CUH
#define KERNELS_ATTENTION_FORWARD_PRODUCERS_CUH

#include <stdint.h>
// (already included: bf16.cuh)
// (already included: mbarrier.cuh)
// (already included: mma.cuh)  // cp_async_16

template <int ROWS, int PRODUCERS, int CONSUMERS>
__device__ __forceinline__ void produce_tile(uint32_t dst, const bf16* src, size_t rs, int valid, const bf16* any) {
    static_assert(PRODUCERS % 64 == 0, "a pass covers whole groups of 8 rows");
    constexpr int RPP = PRODUCERS / 8;  // rows a pass
    const int p = threadIdx.x - CONSUMERS, r0 = p / 8, c = p % 8;
    const uint32_t d = dst + r0 * 128 + ((c ^ (r0 & 7)) << 4);
    const bf16* from = src + r0 * rs + 8 * c;
#pragma unroll
    for (int k = 0; k < ROWS / RPP; k++) {
        const bool ok = r0 + RPP * k < valid;
        cp_async_16(d + k * RPP * 128, ok ? from + (size_t)k * RPP * rs : any, ok);
    }
}

#endif  // KERNELS_ATTENTION_FORWARD_PRODUCERS_CUH

// ---- end producers.cuh ----          // produce_tile (the block's first copies, as version 15's)
// ---- begin softmax_128_keys.cuh ----
// softmax_128_keys.cuh: attention_forward 15 and 16's work on one tile of up to 128 keys, for a
// warpgroup of 64 query rows: S's wgmma, the mask, the online softmax, P V's wgmma.
//
// attend<H>(o, m, l, dq, dk, dv, key0, row0, diagonal, sl): one tile of H halves of 64 keys (H = 2:
//   128 keys; H = 1: the lone half at a query tile's diagonal). S's wgmma for every half, one wait,
//   the mask on the diagonal half, the maximum over all the tile's keys, then for each half its P
//   and its P V's wgmma (the first half's product runs while the second's P is computed), one wait.
//   dq, dk, dv: sw128 descriptors of Q and of the tile's first K and V half (the second is 8 KB
//   on: +512 in a descriptor). o, m, l: the warpgroup's running output, maxima and sums.
// RESCALE_SLACK: the reference point m of a row moves only when the tile's maximum passes it by
//   more than this (version 14's rule); P's terms stay below 2^RESCALE_SLACK.

#ifndef KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH
#define KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH
// (already included: attention_fwd_mma.cuh)  // mask_causal, rescale (version 11's)
// (already included: bf16.cuh)
// (already included: reduce.cuh)             // warp_max
// (already included: wgmma.cuh)

#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif

// The online softmax of a tile, in two steps so that P V can start on the first half while the
// second is exponentiated. s holds the scores (H halves of 64 keys, wgmma's accumulator layout:
// rows g and g + 8 of the warp's 16, four columns of each 8 a lane... as version 11's helpers).
//
// tile_max: the rows' maximum over all H halves, scaled by sl; the reference point m moves only
// when that passes it by more than `slack` (version 14's rule, there per 64 keys); alpha =
// exp2(m_old - m_new); returns whether any row of this thread moved (then O needs rescaling).
template <int H>
__device__ __forceinline__ bool tile_max(const float (&s)[H][1][8][4], float (&m)[2], float (&alpha)[2], float sl,
                                         float slack) {
    bool grew = false;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float a = fmaxf(s[0][0][0][2 * r], s[0][0][0][2 * r + 1]), b = fmaxf(s[0][0][1][2 * r], s[0][0][1][2 * r + 1]);
#pragma unroll
        for (int h = 0; h < H; h++)
#pragma unroll
            for (int n = (h == 0 ? 2 : 0); n < 8; n += 2) {  // two chains of maxima
                a = fmaxf(a, fmaxf(s[h][0][n][2 * r], s[h][0][n][2 * r + 1]));
                b = fmaxf(b, fmaxf(s[h][0][n + 1][2 * r], s[h][0][n + 1][2 * r + 1]));
            }
        const float mx = warp_max<4>(fmaxf(a, b)) * sl;
        const bool up = mx > m[r] + slack;  // always on a row's first tile (m = -inf), which holds key 0
        const float mn = up ? mx : m[r];
        alpha[r] = exp2f(m[r] - mn);
        m[r] = mn;
        grew |= up;
    }
    return grew;
}

// half_p: one half's P = exp2(s sl - m), its rows' sums added to sum, packed to bf16 for P V.
__device__ __forceinline__ void half_p(float (&s)[1][8][4], uint32_t (&p)[4][4], const float (&m)[2],
                                       float (&sum)[2], float sl) {
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[0][n][2 * r] = exp2f(fmaf(s[0][n][2 * r], sl, -m[r]));
            s[0][n][2 * r + 1] = exp2f(fmaf(s[0][n][2 * r + 1], sl, -m[r]));
            sum[r] += s[0][n][2 * r] + s[0][n][2 * r + 1];
        }
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        p[kk][0] = pack_bf16x2(s[0][2 * kk][0], s[0][2 * kk][1]);
        p[kk][1] = pack_bf16x2(s[0][2 * kk][2], s[0][2 * kk][3]);
        p[kk][2] = pack_bf16x2(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        p[kk][3] = pack_bf16x2(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
}

// One tile of H halves (H = 2: 128 keys; H = 1: the lone half at a query tile's diagonal): S's
// wgmma for every half, one wait, the mask on the diagonal half, the maximum, then for each half
// its P and its P V's wgmma (the first half's product runs while the second's P is computed),
// one wait. dk, dv: descriptors of the tile's first K and V half (the second is 8 KB on: +512).
template <int H>
__device__ __forceinline__ void attend(float (&o)[1][8][4], float (&m)[1][2], float (&l)[1][2], uint64_t dq,
                                       uint64_t dk, uint64_t dv, int key0, int row0, bool diagonal, float sl) {
    float sc[H][1][8][4], alpha[1][2], sum[2] = {0.0f, 0.0f};
    uint32_t p[H][4][4];
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < H; h++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(sc[h][0], dq + 2 * kk, dk + 512 * h + 2 * kk, kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    if (diagonal) mask_causal<1>(sc[H - 1], key0 + 64 * (H - 1), row0);  // the last half: keys past a row masked
    if (tile_max<H>(sc, m[0], alpha[0], sl, RESCALE_SLACK)) rescale<1, 8>(o, alpha);
#pragma unroll
    for (int h = 0; h < H; h++) {
        half_p(sc[h], p[h], m[0], sum, sl);
        wgmma_fence();  // this half's P (and O, rescaled) written before the tensor cores read them
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(o[0], p[h][kk], dv + 512 * h + 128 * kk);  // +2048 bytes: 16 keys
    }
    wgmma_commit();
#pragma unroll
    for (int r = 0; r < 2; r++) l[0][r] = fmaf(l[0][r], alpha[0][r], sum[r]);
    wgmma_wait<0>();  // at once, as in version 14
}

#endif  // KERNELS_ATTENTION_FORWARD_SOFTMAX_128_KEYS_CUH

// ---- end softmax_128_keys.cuh ----   // attend: a tile's S, online softmax and P V (version 15's)
// (already included: wgmma.cuh)

#define BR 64      // query rows a block: one warpgroup
#define BC 128     // keys a tile: two halves of 64
#define HSW 64     // the head size this version is written for
#define STAGES 2   // K/V buffers: tile j + 1 is fetched while tile j is computed
#define THREADS 128
#ifndef HEAD_GROUP
#define HEAD_GROUP 24  // heads whose query tiles run together (version 15's remap)
#endif

// map_q: qkv as a (B T) x 3C matrix in 64 x 64 boxes (K and V at a lone diagonal half); map_kv:
// the same matrix in 128 x 64 boxes (a whole tile's K or V); qkv itself for the first copies.
extern "C" __global__ void __launch_bounds__(THREADS, 3)
attention_forward17(bf16* out, float* lse, const TmaMap* map_q, const TmaMap* map_kv, const bf16* qkv, int T, int NH, float sl) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t TILE = BC * 128;                         // one K or V tile: 16 KB (two halves of 8)
    const uint32_t sQ = base, sKV = base + BR * 128;            // buffer s: K at sKV + 2 s TILE, V after it
    const uint32_t full = sKV + 2 * STAGES * TILE;              // buffer s's mbarrier at full + 8 s

    // Version 15's order: HEAD_GROUP heads run their query tiles together, the longest first.
    const int heads = gridDim.x, qtiles = gridDim.y;
    const int L = blockIdx.y * heads + blockIdx.x;
    const int g0 = L / (HEAD_GROUP * qtiles) * HEAD_GROUP;
    const int gn = min(HEAD_GROUP, heads - g0);
    const int r = L - g0 * qtiles;
    const int bh = g0 + r % gn;
    const int q0 = (qtiles - 1 - r / gn) * BR;
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HSW;
    const int row_b = b * T;                // the batch's first row of the (B T) x 3C matrix
    const int halves = q0 / 64 + 1;         // 64-key halves up to the diagonal
    const int tiles = (halves + 1) / 2;     // 128-key tiles; the last holds one half when `halves` is odd
    // Tile i's (i >= 1) K and V into buffer i % STAGES by the TMA, asked for by thread 0.
    auto fetch = [&](int i) {
        const uint32_t sK = sKV + 2 * (i % STAGES) * TILE, bar = full + 8 * (i % STAGES);
        const bool whole = 2 * i + 1 < halves;
        const TmaMap* map = whole ? map_kv : map_q;
        mbar_expect_tx(bar, whole ? 2 * TILE : TILE);
        tma_load_2d(sK, map, C + h * HSW, row_b + i * BC, bar);
        tma_load_2d(sK + TILE, map, 2 * C + h * HSW, row_b + i * BC, bar);
    };
    // Q and tile 0 by the warpgroup's own copies (rows past the diagonal's half or T zero-filled)...
    const size_t rs = 3 * (size_t)C;
    const bf16* k_src = qkv + (size_t)row_b * rs + C + h * HSW;
    produce_tile<BR, THREADS, 0>(sQ, qkv + ((size_t)row_b + q0) * rs + h * HSW, rs, T - q0, qkv);
    produce_tile<BC, THREADS, 0>(sKV, k_src, rs, min(T, 64 * halves), qkv);
    produce_tile<BC, THREADS, 0>(sKV + TILE, k_src + C, rs, min(T, 64 * halves), qkv);
    cp_async_commit();
    if (threadIdx.x == 0) {  // ...while thread 0 readies the TMA and asks it for tile 1
        mbar_init(full, 1);
        mbar_init(full + 8, 1);
        mbar_init_fence();
        tensormap_acquire(map_q);
        tensormap_acquire(map_kv);
        if (tiles > 1) fetch(1);  // buffer 1 is free from the start
    }
    cp_async_wait<0>();
    fence_proxy_async();  // the copies (ordinary writes) ordered before the tensor cores' reads
    __syncthreads();      // every thread's copies have landed, and the barriers are initialised

    const int warp = threadIdx.x / 32;
    const int row0 = q0 + 16 * warp;
    float o[1][8][4], m[1][2] = {{-INFINITY, -INFINITY}}, l[1][2] = {{0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < 8; n++) o[0][n][0] = o[0][n][1] = o[0][n][2] = o[0][n][3] = 0.0f;
    const uint64_t dq = sw128_desc(sQ, 1024);

    for (int j = 0; j < tiles; j++) {
        if (j > 0) {
            __syncthreads();  // everyone is done with tile j - 1, whose buffer...
            if (threadIdx.x == 0 && j + 1 < tiles) fetch(j + 1);  // ...takes tile j + 1
            mbar_wait(full + 8 * (j % STAGES), ((j - 1) / STAGES) & 1);  // tile j landed
        }
        const uint32_t sK = sKV + 2 * (j % STAGES) * TILE;
        const uint64_t dk = sw128_desc(sK, 1024), dv = sw128_desc(sK + TILE, 1024);
        if (2 * j + 1 < halves)
            attend<2>(o, m, l, dq, dk, dv, j * BC, row0, j == tiles - 1, sl);
        else
            attend<1>(o, m, l, dq, dk, dv, j * BC, row0, true, sl);
    }
    store_rows<1, true>(out, lse, o, m, l, row0, b, h, T, NH, HSW);
#else
    __trap();  // wgmma and the TMA need sm_90a (a Hopper GPU): see the header
#endif
}
