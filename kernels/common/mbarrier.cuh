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
