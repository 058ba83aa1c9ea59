// mbarrier.cuh: shared-memory barriers that count arrivals (try_wait: sm_90; the producer and
// consumer handover of attention_forward 13 and 14).
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

#ifndef KERNELS_ATTENTION_FORWARD_MBARRIER_CUH
#define KERNELS_ATTENTION_FORWARD_MBARRIER_CUH

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

#endif  // KERNELS_ATTENTION_FORWARD_MBARRIER_CUH
