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
