// producers.cuh: the producer warps of attention_forward 13 and 14: the shared-memory barriers
// (mbarriers) of their handover to the consumer warpgroups, and their share of a tile's copy.
//
// ---- mbarriers (try_wait: sm_90) -------------------------------------------------------------
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
#include "mma.cuh"  // cp_async_16

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
