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

#include "mma.cuh"  // cp_async_16

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
