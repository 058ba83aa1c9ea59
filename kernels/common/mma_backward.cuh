// mma_backward.cuh: warp-level tensor-core instructions (mma.sync, ldmatrix, cp.async) as small
// inline-PTX functions, with the fragment layouts they imply written out. Used by the tensor-core
// versions of attention_backward (6: TF32, 7 and 8: bf16).
//
// Written for the attention backward while kernels/common/mma.cuh (the forward's) was being
// written: the same names and signatures (mma_bf16_16816, mma_tf32_1688, ldmatrix_x4[_trans],
// cp_async_16, cp_async_commit, cp_async_wait, to_tf32, pack_bf16x2), plus cp_async_4. Folding
// the two is replacing the include and adding cp_async_4 to mma.cuh.
//
// Notation for every layout below (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8"):
//   lane = threadIdx.x % 32,  g = lane / 4 ("groupID", 0..7),  t = lane % 4 ("threadID_in_group").
//   A is M x K ("row": a thread's registers run along K), B is K x N ("col": they run along K
//   too), C and D are M x N. A register holding two bf16 keeps the lower-indexed one in its low
//   16 bits.
//
// mma_bf16_16816(d, a, b0, b1): d += a * b, A 16 x 16 bf16, B 16 x 8 bf16, C/D 16 x 8 fp32.
//   a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//   a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]         b[1] = B[2t+8, 2t+9][g]
//   d[0] = D[g][2t]  d[1] = D[g][2t+1]  d[2] = D[g+8][2t]  d[3] = D[g+8][2t+1]
//   Note that d[0..1] of two horizontally adjacent 16 x 8 accumulators (columns 0..7 and 8..15)
//   hold exactly what a[0] and a[2] of a 16 x 16 A operand hold, and d[2..3] what a[1], a[3]
//   hold: a product computed on the tensor cores can be fed to the next one as its A operand
//   straight from registers (pack_bf16x2 the pairs), with no trip through shared memory.
//
// mma_tf32_1688(d, a, b0, b1): d += a * b, A 16 x 8 tf32, B 8 x 8 tf32, C/D 16 x 8 fp32. Each register
//   holds one 32-bit value (an fp32 bit pattern; the tensor core reads its top 19 bits: round it
//   first with to_tf32 for round-to-nearest rather than truncation).
//   a[0] = A[g][t]  a[1] = A[g + 8][t]  a[2] = A[g][t + 4]  a[3] = A[g + 8][t + 4]
//   b[0] = B[t][g]  b[1] = B[t + 4][g]
//   d: as for m16n8k16.
//
// ldmatrix_x4(r, p): four 8 x 8 matrices of 16-bit elements from shared memory. Lane L passes
//   in p the address of row L % 8 of matrix L / 8 (16 contiguous bytes, 16-byte aligned; rows
//   may lie anywhere). Lane L receives in r[m] row L / 4 of matrix m, elements 2 (L % 4) and
//   2 (L % 4) + 1: (g, 2t) and (g, 2t + 1), the layout of a[], b[] and d[] above.
// ldmatrix_x4_trans(r, p): the same rows, but each matrix is handed out transposed: lane L
//   receives in r[m] the elements (row 2t, column g) and (row 2t + 1, column g) of matrix m
//   (row = the 16-byte row a lane addressed, column = the element within it).
//
// cp_async_16(dst, src, valid): copy 16 bytes global -> shared without passing through registers
//   (cp.async.cg: cached in L2 only). valid == false writes 16 zero bytes instead (src-size 0:
//   nothing is read; src must still be a valid address, e.g. the tensor's base).
// cp_async_4(dst, src, valid): the same for 4 bytes (cp.async.ca).
// cp_async_commit(): closes the group of copies this thread issued since the last commit.
// cp_async_wait<N>(): waits until at most N of this thread's groups are still in flight. Other
//   threads' copies are only visible after a __syncthreads() that follows their wait.
//
// pack_bf16x2(lo, hi): two floats rounded to bf16 and packed (lo in the low half).
// to_tf32(x): x rounded to nearest TF32 (10 mantissa bits, ties away from zero), as the 32-bit
//   register value (low 13 bits zero).

#ifndef KERNELS_COMMON_MMA_BACKWARD_CUH
#define KERNELS_COMMON_MMA_BACKWARD_CUH

#include <cuda_bf16.h>

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(smem_address(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(smem_address(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low 16 bits), .y = hi
    return *reinterpret_cast<unsigned*>(&v);
}

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

#endif  // KERNELS_COMMON_MMA_BACKWARD_CUH
