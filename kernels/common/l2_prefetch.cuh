// l2_prefetch.cuh: asking L2 for data ahead of the load that needs it. Only hints: nothing waits
// for them and no register holds the data, so a kernel can ask early (before a dependent load
// could even be issued) without giving up occupancy. The CPU emulator's tests check every
// address through EMU_CHECK_PREFETCH when they define it: a prefetch outside its buffer faults
// on a GPU, so the range must lie inside one.
//
// prefetch_l2_line(p)          the line holding p, kept ahead of streaming data (evict_last);
//                              sm_80 and later. p: 16 bytes the caller will read.
// prefetch_l2_range(p, bytes)  [p, p + bytes) through sm_90's bulk prefetch (the TMA unit
//                              fetches it; one instruction for up to 4 GB); p and bytes multiples
//                              of 16. Nothing on older GPUs. With per-thread addresses the
//                              compiler issues one per distinct address of the warp, in a loop.
// prefetch_l2_ints(p, n)       the whole 16-byte units of the n ints at p (16-byte aligned): the
//                              token ids, asked for in one instruction; nothing when n < 4.
// Used by encoder_forward 10, 11 and 12, encoder_backward 12 and the encoder_backward headers.

#ifndef KERNELS_COMMON_L2_PREFETCH_CUH
#define KERNELS_COMMON_L2_PREFETCH_CUH

__device__ __forceinline__ void prefetch_l2_line(const void* p) {
#if defined(__CUDA_ARCH__)
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p));
#elif defined(EMU_CHECK_PREFETCH)
    EMU_CHECK_PREFETCH(p, 16);
#endif
}

__device__ __forceinline__ void prefetch_l2_range(const void* p, unsigned bytes) {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
#elif defined(EMU_CHECK_PREFETCH)
    EMU_CHECK_PREFETCH(p, bytes);
#endif
}

__device__ __forceinline__ void prefetch_l2_ints(const int* p, int n) {
    unsigned bytes = (unsigned)n * 4u & ~15u;  // the tail (< 16 bytes) is left out
    if (bytes > 0) prefetch_l2_range(p, bytes);
}

#endif  // KERNELS_COMMON_L2_PREFETCH_CUH
