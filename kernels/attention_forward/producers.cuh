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

#include "bf16.cuh"
#include "mbarrier.cuh"
#include "mma.cuh"  // cp_async_16

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
